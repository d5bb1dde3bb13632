import json
import re

# Step 1: get a lay of the land
print(await tools.bash(command="ls"))
files = json.loads(await tools.list_files())
py_files = [f for f in files if f.endswith(".py")]
print(f"\n{len(py_files)} python files: {py_files}")

# Step 2: find where `helper` is defined and used
defined, used = [], []
for path in py_files:
    src = await tools.read_file(path=path)
    for n, line in enumerate(src.splitlines(), 1):
        if re.match(r"\s*def helper\b", line):
            defined.append(f"{path}:{n}")
        elif re.search(r"\bhelper\b", line):
            used.append(f"{path}:{n}: {line.strip()}")
print("defined at:", defined)
print("used at:")
for u in used:
    print("  " + u)

# Step 3: run the tests to see the current state
result = await tools.bash(command="pytest -x")
print("\nlast line of pytest:", result.strip().splitlines()[-1])
