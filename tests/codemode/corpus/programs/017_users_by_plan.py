import json
from collections import defaultdict

users = json.loads(await tools.run_sql(query="select * from users"))
plans = defaultdict(lambda: {"total": 0, "active": 0, "names": []})
for u in users:
    p = plans[u["plan"]]
    p["total"] += 1
    p["active"] += u["active"]
    p["names"].append(u["name"])

for plan in sorted(plans, key=lambda k: plans[k]["total"], reverse=True):
    p = plans[plan]
    print(f"{plan:<5} {p['active']}/{p['total']} active ({p['active'] / p['total']:.0%}) - {', '.join(p['names'])}")
