import re

LINE = re.compile(r"""
    ^(?P<date>\d{4}-\d{2}-\d{2})\s
    (?P<time>\d{2}:\d{2}:\d{2})\s
    (?P<level>INFO|WARN|ERROR)\s
    (?P<message>.+)$
""", re.VERBOSE | re.MULTILINE)

log = await tools.read_file(path="logs/app.log")
records = [m.groupdict() for m in LINE.finditer(log)]
print(f"parsed {len(records)} records")

redacted = re.sub(r"(pid|attempt)=(\d+)", lambda m: f"{m.group(1)}=<{'#' * len(m.group(2))}>", log)
print(redacted.splitlines()[0])
swapped = re.sub(r"(?P<h>\d{2}):(?P<m>\d{2}):\d{2}", r"\g<m>m past \g<h>h", records[2]["time"])
print("time rewritten:", swapped)
codes = re.findall(r"\b([45]\d{2})\b", log)
print("HTTP error codes:", codes)
print("error messages:", [r["message"] for r in records if r["level"] == "ERROR"])
print(re.split(r"\s*[=,]\s*", "took=1200ms, attempt = 2"))
