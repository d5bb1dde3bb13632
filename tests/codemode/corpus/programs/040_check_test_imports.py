import re

test_src = await tools.read_file(path="tests/test_app.py")
imports = re.findall(r"^from ([\w.]+) import (.+)$", test_src, re.MULTILINE)
problems = []
for module, names in imports:
    path = module.replace(".", "/") + ".py"
    try:
        source = await tools.read_file(path=path)
    except RuntimeError:
        problems.append(f"module {module} not found at {path}")
        continue
    for name in (n.strip() for n in names.split(",")):
        if not re.search(rf"^(def|class) {name}\b|^{name}\s*=", source, re.MULTILINE):
            problems.append(f"{name} not defined in {path}")
        else:
            print(f"ok: {module}.{name}")
print("problems:", problems or "none")
