import asyncio
import json
from itertools import combinations
from statistics import correlation

symbols = ["AAPL", "MSFT", "TSLA"]
raw = await asyncio.gather(*[tools.stock_prices(symbol=s) for s in symbols])
series = {s: json.loads(r) for s, r in zip(symbols, raw)}
returns = {s: [b / a - 1 for a, b in zip(p, p[1:])] for s, p in series.items()}

for a, b in combinations(symbols, 2):
    r = correlation(returns[a], returns[b])
    label = "strong" if abs(r) > 0.7 else "moderate" if abs(r) > 0.3 else "weak"
    print(f"{a}/{b}: r={r:+.3f} ({label})")
