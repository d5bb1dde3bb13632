import json

users = json.loads(await tools.run_sql(query="SELECT * FROM users"))
orders = json.loads(await tools.run_sql(query="SELECT * FROM orders"))

names = {u["id"]: u["name"] for u in users}
spend = {}
for order in orders:
    if order["status"] == "cancelled":
        continue
    spend[order["user_id"]] = spend.get(order["user_id"], 0) + order["total"]

ranking = sorted(spend.items(), key=lambda item: item[1], reverse=True)
for user_id, total in ranking:
    print(f"{names[user_id]:<12} {total:>8.2f}")

no_orders = [names[u] for u in names if u not in spend]
print("Users with no (non-cancelled) orders:", ", ".join(no_orders))
