import csv
import io

text = await tools.read_file(path="data/sales.csv")
daily = {}
for row in csv.DictReader(io.StringIO(text)):
    daily[row["date"]] = daily.get(row["date"], 0.0) + int(row["units"]) * float(row["price"])

running = 0.0
peak_day = max(daily, key=daily.get)
for day in sorted(daily):
    running += daily[day]
    bar = "*" * int(daily[day] // 10)
    marker = " <- peak" if day == peak_day else ""
    print(f"{day} {daily[day]:7.2f} {running:8.2f} {bar}{marker}")
