import json
from collections import Counter

orders = json.loads(await tools.list_orders())
qty = Counter()
order_count = Counter()
for order in orders:
    if order["status"] == "cancelled":
        continue
    for item in order["items"]:
        qty[item["sku"]] += item["qty"]
        order_count[item["sku"]] += 1

print("SKU    units  orders")
for sku, units in qty.most_common():
    print(f"{sku:<6} {units:>5}  {order_count[sku]:>6}")
