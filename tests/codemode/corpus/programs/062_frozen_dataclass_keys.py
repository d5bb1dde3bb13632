import csv
import io
from dataclasses import dataclass

@dataclass(frozen=True)
class Key:
    region: str
    product: str

rows = csv.DictReader(io.StringIO(await tools.read_file(path="data/sales.csv")))
totals = {}
for r in rows:
    k = Key(r["region"], r["product"])
    totals[k] = totals.get(k, 0) + int(r["units"])

try:
    k.region = "west"
except Exception as e:
    print(f"cannot mutate key: {type(e).__name__}")

print(f"{len(totals)} distinct (region, product) keys")
for k in sorted(totals, key=lambda k: (k.region, k.product)):
    print(f"  {k.region:<5} / {k.product:<6}: {totals[k]}")
print("lookup north/gadget:", totals[Key("north", "gadget")])
