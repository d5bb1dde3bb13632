import json

def running_stats():
    count, total, lo, hi = 0, 0.0, None, None
    value = yield None
    while True:
        count += 1
        total += value
        lo = value if lo is None else min(lo, value)
        hi = value if hi is None else max(hi, value)
        value = yield {"n": count, "mean": round(total / count, 2), "min": lo, "max": hi}

stats = {}
for sym in ["AAPL", "MSFT"]:
    gen = running_stats()
    next(gen)
    for price in json.loads(await tools.stock_prices(symbol=sym)):
        snapshot = gen.send(price)
        print(f"{sym} {price:>7.2f} -> mean {snapshot['mean']:>7.2f}  range [{snapshot['min']}, {snapshot['max']}]")
    stats[sym] = snapshot
    gen.close()
return stats
