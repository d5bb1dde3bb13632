import csv
import io
import math

rows = list(csv.DictReader(io.StringIO(await tools.read_file(path="data/sales.csv"))))
revenues = [int(r["units"]) * float(r["price"]) for r in rows]
mean = sum(revenues) / len(revenues)
std = math.sqrt(sum((x - mean) ** 2 for x in revenues) / (len(revenues) - 1))
print(f"mean={mean:.2f} std={std:.2f}")
for row, rev in zip(rows, revenues):
    z = (rev - mean) / std
    if abs(z) > 1:
        print(f"outlier: {row['date']} {row['region']:<5} {row['product']:<6} revenue={rev:7.2f} z={z:+.2f}")
