import json

files = json.loads(await tools.list_files())
names = [f.rsplit("/", 1)[-1] for f in files]
print(sorted(names))
print(sorted(names, key=str.lower))
print(sorted(files, key=len, reverse=True)[:3])
print(sorted(files, key=lambda p: (p.count("/"), p.rsplit(".", 1)[-1], p)))

sizes = {f: len(await tools.read_file(path=f)) for f in files}
print("largest:", max(sizes, key=sizes.get), "smallest:", min(sizes, key=sizes.get))
by_dir = sorted(files, key=lambda p: p.split("/")[0] if "/" in p else "")
print(by_dir)
