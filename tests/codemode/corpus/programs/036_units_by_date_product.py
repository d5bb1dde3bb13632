import csv
import io

reader = csv.reader(io.StringIO(await tools.read_file(path="data/sales.csv")))
header = next(reader)
idx = {name: i for i, name in enumerate(header)}
grid = {}
for row in reader:
    grid.setdefault(row[idx["date"]], {}).setdefault(row[idx["product"]], 0)
    grid[row[idx["date"]]][row[idx["product"]]] += int(row[idx["units"]])

products = sorted({p for day in grid.values() for p in day})
print("date        " + " ".join(f"{p:>7}" for p in products))
for date in sorted(grid):
    print(date + "  " + " ".join(f"{grid[date].get(p, ''):>7}" for p in products))
