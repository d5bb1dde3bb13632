from collections import Counter

log = await tools.read_file(path="logs/app.log")
lines = [line for line in log.splitlines() if line.strip()]
levels = Counter(line.split()[2] for line in lines)
print("Log levels:", dict(levels.most_common()))

print("Errors:")
for line in lines:
    if " ERROR " in line:
        print("  -", line.split(" ERROR ", 1)[1])
