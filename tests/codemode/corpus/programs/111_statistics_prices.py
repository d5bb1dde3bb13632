import json
import statistics as st

report = {}
for sym in ("AAPL", "MSFT", "TSLA"):
    p = json.loads(await tools.stock_prices(symbol=sym))
    report[sym] = {
        "mean": round(st.mean(p), 2),
        "median": st.median(p),
        "stdev": round(st.stdev(p), 3),
        "pvariance": round(st.pvariance(p), 3),
        "cv_pct": round(st.stdev(p) / st.mean(p) * 100, 2),
    }
most_volatile = max(report, key=lambda s: report[s]["cv_pct"])
print(f"most volatile (coefficient of variation): {most_volatile}")
q = st.quantiles(json.loads(await tools.stock_prices(symbol="TSLA")), n=4)
print("TSLA quartiles:", [round(x, 2) for x in q])
return report
