import json

prices = json.loads(await tools.stock_prices(symbol="tsla"))
window = 3
sma = [round(sum(prices[i - window + 1:i + 1]) / window, 2) for i in range(window - 1, len(prices))]
print("TSLA closes:", prices)
print(f"SMA({window}):", sma)
signal = "bullish" if prices[-1] > sma[-1] else "bearish"
print(f"Last close {prices[-1]} vs SMA {sma[-1]} -> {signal}")
