import json

symbols = ["AAPL", "MSFT", "TSLA"]
summary = {}
for sym in symbols:
    prices = json.loads(await tools.stock_prices(symbol=sym))
    change = (prices[-1] - prices[0]) / prices[0] * 100
    daily = [round((b - a) / a * 100, 2) for a, b in zip(prices, prices[1:])]
    summary[sym] = {"start": prices[0], "end": prices[-1], "change_pct": round(change, 2), "daily_pct": daily}

best = max(summary, key=lambda s: summary[s]["change_pct"])
print(f"Best performer: {best} ({summary[best]['change_pct']:+.2f}%)")
return summary
