import csv
import io
from collections import defaultdict

text = await tools.read_file(path="data/sales.csv")
rows = list(csv.DictReader(io.StringIO(text)))

revenue = defaultdict(float)
for row in rows:
    revenue[row["region"]] += int(row["units"]) * float(row["price"])

print(f"Loaded {len(rows)} rows")
for region, total in sorted(revenue.items(), key=lambda kv: kv[1], reverse=True):
    print(f"{region:<6} ${total:>8.2f}")

return {"rows": len(rows), "total_revenue": round(sum(revenue.values()), 2)}
