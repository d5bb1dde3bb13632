import json
import re

files = json.loads(await tools.list_files(directory="src"))
pattern = re.compile(r"^def (\w+)\((.*?)\):", re.MULTILINE)
inventory = {}
for path in files:
    source = await tools.read_file(path=path)
    funcs = pattern.findall(source)
    if funcs:
        inventory[path] = [f"{name}({args})" for name, args in funcs]

for path, funcs in inventory.items():
    print(path)
    for f in funcs:
        print("   ", f)
return {path: len(funcs) for path, funcs in inventory.items()}
