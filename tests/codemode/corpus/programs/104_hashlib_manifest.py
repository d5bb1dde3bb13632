import hashlib
import json

paths = json.loads(await tools.list_files())
manifest = {}
for path in paths:
    data = (await tools.read_file(path=path)).encode("utf-8")
    manifest[path] = {"sha256": hashlib.sha256(data).hexdigest()[:16], "md5": hashlib.md5(data).hexdigest()[:8],
                      "size": len(data)}

digest = hashlib.sha1(json.dumps(manifest, sort_keys=True).encode()).hexdigest()
for path, meta in manifest.items():
    print(f"{meta['sha256']}  {meta['size']:>4}  {path}")
print("manifest digest:", digest)
await tools.write_file(path="MANIFEST.json", content=json.dumps(manifest, indent=1, sort_keys=True))
