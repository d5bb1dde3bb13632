import re

log = await tools.read_file(path="logs/app.log")
units = {"ms": 1, "s": 1000}
durations = []
for line in log.splitlines():
    for value, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|s)\b", line):
        durations.append((line.split()[2], float(value) * units[unit], line))

durations.sort(key=lambda d: d[1], reverse=True)
for level, ms, line in durations:
    print(f"[{level:<5}] {ms:>8.0f} ms  | {line[:19]}")
print(f"slowest event: {durations[0][1] / 1000:.1f}s")
