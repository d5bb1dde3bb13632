import json

requested = [1, 4, 99, 2]
found, missing = [], []
for uid in requested:
    try:
        user = json.loads(await tools.get_user(user_id=uid))
    except RuntimeError as exc:
        missing.append(uid)
        print(f"warning: {exc}")
        continue
    found.append(user)

for u in found:
    print(f"#{u['id']} {u['name']} <{u['email']}> plan={u['plan']}")
print(f"{len(found)} found, missing ids: {missing}")
