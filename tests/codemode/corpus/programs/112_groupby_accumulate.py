import csv
import io
from itertools import accumulate, groupby
from operator import itemgetter

rows = list(csv.DictReader(io.StringIO(await tools.read_file(path="data/sales.csv"))))
for r in rows:
    r["revenue"] = int(r["units"]) * float(r["price"])

rows.sort(key=itemgetter("date"))
days, daily = [], []
for day, group in groupby(rows, key=itemgetter("date")):
    group = list(group)
    days.append(day)
    daily.append(sum(g["revenue"] for g in group))
    print(f"{day}: {len(group)} sale(s) {', '.join(g['product'] for g in group)}")

for day, cum, best in zip(days, accumulate(daily), accumulate(daily, max)):
    print(f"{day} cumulative={cum:7.2f} best-day-so-far={best:6.2f}")
