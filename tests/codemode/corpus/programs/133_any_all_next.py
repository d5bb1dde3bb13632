import json

users = json.loads(await tools.run_sql(query="select * from users"))
orders = json.loads(await tools.list_orders())

first_free = next((u for u in users if u["plan"] == "free"), None)
first_admin = next((u for u in users if u["plan"] == "enterprise"), None)
print("first free user:", first_free["name"] if first_free else None)
print("first enterprise user:", first_admin)
print("any cancelled:", any(o["status"] == "cancelled" for o in orders))
print("all totals positive:", all(o["total"] > 0 for o in orders))
print("every user has an email:", all("@" in u["email"] for u in users))
print("units shipped:", sum(i["qty"] for o in orders if o["status"] == "shipped" for i in o["items"]))
biggest_item = max((i for o in orders for i in o["items"]), key=lambda i: i["qty"])
print("biggest line item:", biggest_item)
print("distinct countries:", sorted({u["country"] for u in users}))
