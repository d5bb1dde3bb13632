import json

files = json.loads(await tools.list_files(directory="src"))
counts = {}
for path in files:
    out = await tools.bash(command=f"wc -l {path}")
    n, name = out.split()
    counts[name] = int(n)

width = max(len(p) for p in counts)
for path, n in sorted(counts.items(), key=lambda kv: -kv[1]):
    print(f"{path:<{width}}  {n:>3} lines")
print(f"{'TOTAL':<{width}}  {sum(counts.values()):>3} lines")
