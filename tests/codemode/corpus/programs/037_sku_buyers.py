import json

orders = json.loads(await tools.list_orders())
buyers = {}
for order in orders:
    for item in order["items"]:
        buyers.setdefault(item["sku"], set()).add(order["user_id"])

names = {}
for uid in sorted({u for ids in buyers.values() for u in ids}):
    names[uid] = json.loads(await tools.get_user(user_id=uid))["name"]

result = {sku: sorted(names[u] for u in ids) for sku, ids in sorted(buyers.items())}
for sku, people in result.items():
    print(f"{sku}: bought by {len(people)} -> {'; '.join(people)}")
return result
