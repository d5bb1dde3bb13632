import json

symbols = ["AAPL", "MSFT", "TSLA"]
series = [json.loads(await tools.stock_prices(symbol=s)) for s in symbols]
days = list(zip(*series))
print("day  " + "  ".join(f"{s:>7}" for s in symbols) + "   leader")
for day, closes in enumerate(days, 1):
    leader = symbols[closes.index(max(closes))]
    print(f"{day:>3}  " + "  ".join(f"{c:>7.1f}" for c in closes) + f"   {leader}")
ranges = {s: round(max(p) - min(p), 2) for s, p in zip(symbols, series)}
print("Range:", ranges)
