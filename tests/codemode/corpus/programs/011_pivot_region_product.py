import csv
import io

rows = list(csv.DictReader(io.StringIO(await tools.read_file(path="data/sales.csv"))))
regions = sorted({r["region"] for r in rows})
products = sorted({r["product"] for r in rows})

table = {(r, p): 0 for r in regions for p in products}
for row in rows:
    table[(row["region"], row["product"])] += int(row["units"])

header = "region  " + "".join(f"{p:>8}" for p in products) + "   total"
print(header)
print("-" * len(header))
for region in regions:
    cells = [table[(region, p)] for p in products]
    print(f"{region:<8}" + "".join(f"{c:>8}" for c in cells) + f"{sum(cells):>8}")
totals = [sum(table[(r, p)] for r in regions) for p in products]
print(f"{'total':<8}" + "".join(f"{t:>8}" for t in totals) + f"{sum(totals):>8}")
