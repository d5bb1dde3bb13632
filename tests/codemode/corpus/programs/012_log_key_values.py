import re

log = await tools.read_file(path="logs/app.log")
pairs = re.findall(r"(\w+)=(\S+)", log)
print(f"Found {len(pairs)} key=value pairs")
by_key = {}
for key, value in pairs:
    by_key.setdefault(key, []).append(value)
for key in sorted(by_key):
    print(f"{key}: {by_key[key]}")

statuses = [int(v) for v in by_key.get("status", [])]
return {"ok_requests": sum(1 for s in statuses if 200 <= s < 300), "paths": by_key.get("path", [])}
