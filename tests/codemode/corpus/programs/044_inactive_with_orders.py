import json

inactive = json.loads(await tools.run_sql(query="select * from users where active = false"))
print(f"{len(inactive)} inactive user(s)")
flagged = []
for u in inactive:
    orders = json.loads(await tools.list_orders(user_id=u["id"]))
    open_orders = [o for o in orders if o["status"] in ("pending", "shipped")]
    print(f"- {u['name']}: {len(orders)} orders, {len(open_orders)} open")
    if orders:
        flagged.append({"user": u["name"], "order_ids": [o["id"] for o in orders]})
if not flagged:
    print("No inactive users have order history.")
return flagged
