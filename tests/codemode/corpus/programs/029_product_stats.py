import csv
import io

rows = list(csv.DictReader(io.StringIO(await tools.read_file(path="data/sales.csv"))))
stats = {}
for r in rows:
    s = stats.setdefault(r["product"], {"units": 0, "revenue": 0.0, "sales": 0, "regions": set()})
    s["units"] += int(r["units"])
    s["revenue"] += int(r["units"]) * float(r["price"])
    s["sales"] += 1
    s["regions"].add(r["region"])

for product, s in sorted(stats.items(), key=lambda kv: kv[1]["revenue"], reverse=True):
    print(f"{product:<7} units={s['units']:>3} revenue={s['revenue']:>7.2f} "
          f"avg/sale={s['units'] / s['sales']:.1f} regions={','.join(sorted(s['regions']))}")
