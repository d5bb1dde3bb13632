import csv
import io
from decimal import Decimal, ROUND_HALF_EVEN, ROUND_HALF_UP, getcontext

getcontext().prec = 28
TAX = {"north": Decimal("0.08"), "south": Decimal("0.0725"), "east": Decimal("0.06625")}
CENT = Decimal("0.01")

text = await tools.read_file(path="data/sales.csv")
tax_up = tax_even = Decimal(0)
for row in csv.DictReader(io.StringIO(text)):
    net = Decimal(row["units"]) * Decimal(row["price"])
    raw = net * TAX[row["region"]]
    tax_up += raw.quantize(CENT, rounding=ROUND_HALF_UP)
    tax_even += raw.quantize(CENT, rounding=ROUND_HALF_EVEN)
    print(f"{row['date']} {row['region']:<5} net={net:>7} tax={raw:.5f}")
print(f"total tax (half-up):   {tax_up}")
print(f"total tax (half-even): {tax_even}")
print("difference:", tax_up - tax_even)
