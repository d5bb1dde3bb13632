import json
from collections import deque

prices = json.loads(await tools.stock_prices(symbol="TSLA"))
window = deque(maxlen=3)
for day, price in enumerate(prices, 1):
    window.append(price)
    if len(window) == window.maxlen:
        print(f"day {day}: window={list(window)} max={max(window)} min={min(window)}")

log = await tools.read_file(path="logs/app.log")
tail = deque(log.splitlines(), maxlen=3)
print("tail -3:")
for line in tail:
    print("  " + line)
recent = deque()
for line in log.splitlines():
    recent.appendleft(line.split()[2])
    if len(recent) > 4:
        recent.pop()
print("most recent levels first:", list(recent))
recent.rotate(1)
print("rotated:", list(recent))
