import asyncio
import json

paths = json.loads(await tools.list_files())
contents = await asyncio.gather(*(tools.read_file(path=p) for p in paths))
sizes = dict(zip(paths, map(len, contents)))
by_ext = {}
for path, size in sizes.items():
    ext = path.rsplit(".", 1)[-1]
    by_ext[ext] = by_ext.get(ext, 0) + size

print(f"{len(paths)} files, {sum(sizes.values())} chars")
for ext, size in sorted(by_ext.items(), key=lambda kv: -kv[1]):
    print(f"  .{ext:<5} {size:>5}")
largest = max(sizes, key=sizes.get)
return {"largest": largest, "size": sizes[largest]}
