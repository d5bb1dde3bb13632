import json
from dataclasses import astuple, dataclass, field

@dataclass
class LineItem:
    sku: str
    qty: int

@dataclass
class Order:
    id: int
    user_id: int
    total: float
    status: str
    items: list[LineItem] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d):
        return cls(d["id"], d["user_id"], d["total"], d["status"], [LineItem(**i) for i in d["items"]])

    @property
    def units(self):
        return sum(i.qty for i in self.items)

    @property
    def is_open(self):
        return self.status in {"pending", "shipped"}

orders = [Order.from_dict(d) for d in json.loads(await tools.list_orders())]
open_orders = [o for o in orders if o.is_open]
for o in open_orders:
    print(f"Order {o.id}: {o.units} units, ${o.total:.2f} [{o.status}]")
print(f"{len(open_orders)} open of {len(orders)}; open units = {sum(o.units for o in open_orders)}")
print(astuple(orders[1]))
