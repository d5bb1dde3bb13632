import csv
import io
from collections import namedtuple

text = await tools.read_file(path="data/sales.csv")
reader = csv.reader(io.StringIO(text))
Sale = namedtuple("Sale", next(reader))
sales = [Sale(*row)._replace(units=int(row[3]), price=float(row[4])) for row in reader]

print(Sale._fields)
print(sales[0])
big = [s for s in sales if s.units * s.price >= 70]
for s in big:
    print(f"{s.date} {s.region}: {s.units} x {s.product} @ {s.price:.2f}")
print(dict(sales[-1]._asdict()))
