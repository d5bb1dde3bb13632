import json

users = json.loads(await tools.run_sql(query="select * from users"))
orders = json.loads(await tools.list_orders())
plan_of = {u["id"]: u["plan"] for u in users}

buckets = {}
for o in orders:
    buckets.setdefault(plan_of[o["user_id"]], []).append(o["total"])

result = {}
for plan, totals in sorted(buckets.items()):
    result[plan] = {"orders": len(totals), "avg": round(sum(totals) / len(totals), 2), "max": max(totals)}
    print(f"{plan:>5}: {len(totals)} orders, avg ${result[plan]['avg']:.2f}, max ${max(totals):.2f}")
return result
