import json
import math

summary = []
for sym in ["AAPL", "MSFT", "TSLA"]:
    p = json.loads(await tools.stock_prices(symbol=sym))
    growth = [b / a for a, b in zip(p, p[1:])]
    geo = math.prod(growth) ** (1 / len(growth)) - 1
    log_ret = [math.log(g) for g in growth]
    vol = math.sqrt(sum((x - sum(log_ret) / len(log_ret)) ** 2 for x in log_ret) / (len(log_ret) - 1))
    assert math.isclose(math.prod(growth), p[-1] / p[0])
    summary.append((sym, geo, vol))
    print(f"{sym}: geometric daily return {geo:+.4%}, log-vol {vol:.4f}, annualised ~{vol * math.sqrt(252):.1%}")

best = max(summary, key=lambda s: s[1] / s[2])
print(f"best return/vol: {best[0]} ({best[1] / best[2]:.3f})")
print("floor/ceil of 99.99:", math.floor(99.99), math.ceil(99.99), "| hypot:", math.hypot(3, 4))
