import json
from contextlib import contextmanager

@contextmanager
def collecting(label, sink):
    bucket = []
    try:
        yield bucket
    except RuntimeError as exc:
        bucket.append(f"<error: {exc}>")
    finally:
        sink[label] = bucket

results = {}
with collecting("readme", results) as out:
    text = await tools.read_file(path="README.md")
    out.extend(l for l in text.splitlines() if l.startswith("#"))
with collecting("changelog", results) as out:
    text = await tools.read_file(path="CHANGELOG.md")
    out.append(text.splitlines()[0])
with collecting("owners", results) as out:
    out.extend(json.loads(await tools.read_file(path="data/config.json"))["owners"])

for label, items in results.items():
    print(f"{label}: {items}")
