import json

class Inventory:
    def __init__(self):
        self._stock = {}

    def add(self, sku, qty):
        self._stock[sku] = self._stock.get(sku, 0) + qty
        return self

    def remove(self, sku, qty):
        if self._stock.get(sku, 0) < qty:
            raise KeyError(f"insufficient stock for {sku}: have {self._stock.get(sku, 0)}, need {qty}")
        self._stock[sku] -= qty

    def __len__(self):
        return sum(1 for q in self._stock.values() if q > 0)

    def __contains__(self, sku):
        return self._stock.get(sku, 0) > 0

    def __iter__(self):
        return iter(sorted(self._stock.items()))

    def __getitem__(self, sku):
        return self._stock.get(sku, 0)

inv = Inventory().add("W-1", 12).add("G-7", 3).add("Z-3", 4)
orders = json.loads(await tools.list_orders())
failed = []
for order in sorted(orders, key=lambda o: o["id"]):
    if order["status"] == "cancelled":
        continue
    for item in order["items"]:
        try:
            inv.remove(item["sku"], item["qty"])
        except KeyError as e:
            failed.append(order["id"])
            print(f"order {order['id']}: {e.args[0]}")

print(f"{len(inv)} SKUs still in stock; 'G-7' in inv -> {'G-7' in inv}; W-1 left: {inv['W-1']}")
for sku, qty in inv:
    print(f"  {sku}: {qty}")
return failed
