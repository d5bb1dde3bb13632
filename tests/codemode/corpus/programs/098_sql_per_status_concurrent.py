import asyncio
import json

statuses = ["pending", "shipped", "delivered", "cancelled"]
queries = [f"SELECT * FROM orders WHERE status = '{s}'" for s in statuses]
results = await asyncio.gather(*map(lambda q: tools.run_sql(query=q), queries))
summary = {}
for status, res in zip(statuses, results):
    rows = json.loads(res)
    summary[status] = {"n": len(rows), "sum": round(sum(r["total"] for r in rows), 2),
                       "ids": [r["id"] for r in rows]}

width = max(map(len, statuses))
for s, info in summary.items():
    print(f"{s:>{width}}: {info['n']} orders, ${info['sum']:>7.2f}  {info['ids']}")
assert sum(i["n"] for i in summary.values()) == len(json.loads(await tools.run_sql(query="select * from orders")))
print("all orders accounted for")
