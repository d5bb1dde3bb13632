import json

files = json.loads(await tools.list_files())
todos = []
for path in files:
    if not path.endswith(".py"):
        continue
    content = await tools.read_file(path=path)
    for lineno, line in enumerate(content.splitlines(), start=1):
        if "TODO" in line:
            todos.append((path, lineno, line.split("TODO", 1)[1].lstrip(": ").strip()))

print(f"Found {len(todos)} TODOs")
for path, lineno, note in todos:
    print(f"{path}:{lineno}: {note}")
