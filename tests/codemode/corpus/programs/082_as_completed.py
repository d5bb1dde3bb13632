import asyncio
import json

symbols = ["AAPL", "MSFT", "TSLA", "NFLX"]

async def analyse(sym):
    prices = json.loads(await tools.stock_prices(symbol=sym))
    if not prices:
        raise ValueError(f"no data for {sym}")
    return sym, prices[-1], (prices[-1] / prices[0] - 1) * 100

results, errors = [], []
for fut in asyncio.as_completed([analyse(s) for s in symbols]):
    try:
        results.append(await fut)
    except ValueError as e:
        errors.append(str(e))

for sym, last, pct in sorted(results):
    print(f"{sym:<5} last={last:>7.2f} change={pct:+6.2f}%")
print("errors:", errors)
