import json

users = json.loads(await tools.run_sql(query="select * from users"))
segments = {"vip": [], "regular": [], "at_risk": [], "dormant": []}
for user in users:
    orders = json.loads(await tools.list_orders(user_id=user["id"]))
    live = [o for o in orders if o["status"] != "cancelled"]
    spent = sum(o["total"] for o in live)
    if not user["active"]:
        seg = "dormant"
    elif spent >= 100:
        seg = "vip"
    elif live:
        seg = "regular"
    else:
        seg = "at_risk"
    segments[seg].append(f"{user['name']} (${spent:.0f})")

for seg, members in segments.items():
    print(f"{seg:>8}: {', '.join(members) if members else '-'}")
return {seg: len(m) for seg, m in segments.items()}
