import shlex

commands = ["ls -la", "git log --oneline -n 3", "wc -l src/app.py", "pytest -k 'helper and not slow'", "make serve"]
for cmd in commands:
    argv = shlex.split(cmd)
    out = await tools.bash(command=shlex.join(argv))
    first = out.splitlines()[0] if out else ""
    status = "missing" if "command not found" in out else "ok"
    print(f"{argv[0]:<6} argc={len(argv)} [{status}] {first}")
print(shlex.quote("file with spaces.txt"))
