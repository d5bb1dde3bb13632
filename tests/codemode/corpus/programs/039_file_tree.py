import json

paths = json.loads(await tools.list_files())
tree = {}
for path in paths:
    node = tree
    parts = path.split("/")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = None

def render(node, prefix=""):
    entries = sorted(node.items(), key=lambda kv: (kv[1] is None, kv[0]))
    for i, (name, child) in enumerate(entries):
        last = i == len(entries) - 1
        print(prefix + ("└── " if last else "├── ") + name + ("/" if child is not None else ""))
        if child is not None:
            render(child, prefix + ("    " if last else "│   "))

print(".")
render(tree)
print(f"\n{len(paths)} files")
