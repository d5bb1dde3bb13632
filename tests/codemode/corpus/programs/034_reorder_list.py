import json

stock = {"W-1": 8, "G-7": 2, "Z-3": 5, "Q-9": 40}
reorder_point = {"W-1": 10, "G-7": 4, "Z-3": 2, "Q-9": 5}

orders = json.loads(await tools.list_orders())
open_demand = {}
for o in orders:
    if o["status"] in ("pending", "shipped"):
        for item in o["items"]:
            open_demand[item["sku"]] = open_demand.get(item["sku"], 0) + item["qty"]

to_reorder = []
for sku in sorted(stock):
    projected = stock[sku] - open_demand.get(sku, 0)
    flag = projected < reorder_point[sku]
    print(f"{sku}: on hand {stock[sku]:>3}, demand {open_demand.get(sku, 0):>3}, projected {projected:>4}{'  REORDER' if flag else ''}")
    if flag:
        to_reorder.append({"sku": sku, "qty": reorder_point[sku] * 2 - projected})
return to_reorder
