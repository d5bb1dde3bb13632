log = await tools.bash(command="git log --oneline -n 10")
commits = []
for line in log.strip().splitlines():
    sha, message = line.split(" ", 1)
    kind, _, subject = message.partition(": ")
    commits.append({"sha": sha, "type": kind, "subject": subject})

by_type = {}
for c in commits:
    by_type.setdefault(c["type"], []).append(c["subject"])

print("Changelog")
for kind in ("feat", "fix", "chore"):
    if kind in by_type:
        print(f"\n### {kind}")
        for subject in by_type[kind]:
            print(f"- {subject}")
return commits
