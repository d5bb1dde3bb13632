import csv
import io
from fractions import Fraction

rows = list(csv.DictReader(io.StringIO(await tools.read_file(path="data/sales.csv"))))
total_units = sum(int(r["units"]) for r in rows)
shares = {}
for r in rows:
    shares[r["product"]] = shares.get(r["product"], Fraction(0)) + Fraction(int(r["units"]), total_units)

for product, share in sorted(shares.items(), key=lambda kv: kv[1], reverse=True):
    print(f"{product:<7} {str(share):>6} = {float(share):.3f}  (~{share.limit_denominator(10)})")
print("shares sum to one:", sum(shares.values()) == 1)
