import json
from functools import partial, reduce
import operator

orders = json.loads(await tools.list_orders())
total = reduce(lambda acc, o: acc + o["total"], orders, 0.0)
units = reduce(operator.add, (i["qty"] for o in orders for i in o["items"]))
merged = reduce(lambda a, b: {**a, **b}, ({o["id"]: o["status"]} for o in orders))
print(f"total={total:.2f} units={units}")
print("status by id:", merged)

def over(threshold, order):
    return order["total"] > threshold

big = list(filter(partial(over, 50), orders))
print("orders over $50:", [o["id"] for o in big])
round2 = partial(round, ndigits=2)
print("avg:", round2(total / len(orders)))
