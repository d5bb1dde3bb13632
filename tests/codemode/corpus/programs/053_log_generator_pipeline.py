import re
from itertools import islice

log = await tools.read_file(path="logs/app.log")

def parse(lines):
    pat = re.compile(r"^(?P<date>\S+) (?P<time>\S+) (?P<level>[A-Z]+) (?P<msg>.*)$")
    for line in lines:
        if m := pat.match(line):
            yield m.groupdict()

def only(records, *levels):
    return (r for r in records if r["level"] in levels)

def enrich(records):
    for n, r in enumerate(records, 1):
        r["n"] = n
        r["words"] = len(r["msg"].split())
        yield r

pipeline = enrich(only(parse(log.splitlines()), "WARN", "ERROR"))
first_three = list(islice(pipeline, 3))
for r in first_three:
    print(f"{r['n']}. {r['time']} {r['level']:<5} {r['msg']} ({r['words']} words)")
remaining = sum(1 for _ in pipeline)
print(f"...and {remaining} more")
