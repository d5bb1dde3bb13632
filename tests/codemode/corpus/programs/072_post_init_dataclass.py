import csv
import io
from dataclasses import dataclass, field
from datetime import date

@dataclass
class Sale:
    date: str
    region: str
    product: str
    units: int
    price: float
    revenue: float = field(init=False)
    weekday: str = field(init=False)

    def __post_init__(self):
        self.units = int(self.units)
        self.price = float(self.price)
        self.revenue = round(self.units * self.price, 2)
        self.weekday = date.fromisoformat(self.date).strftime("%A")

text = await tools.read_file(path="data/sales.csv")
sales = [Sale(**row) for row in csv.DictReader(io.StringIO(text))]
by_weekday = {}
for s in sales:
    by_weekday[s.weekday] = by_weekday.get(s.weekday, 0) + s.revenue
for day, rev in by_weekday.items():
    print(f"{day:<9} {rev:>7.2f}")
best = max(sales, key=lambda s: s.revenue)
print(f"Best single sale: {best.units} x {best.product} in {best.region} on {best.weekday} = {best.revenue}")
