import heapq
import json

orders = json.loads(await tools.list_orders())
top3 = heapq.nlargest(3, orders, key=lambda o: o["total"])
bottom2 = heapq.nsmallest(2, orders, key=lambda o: o["total"])
print("top 3:", [(o["id"], o["total"]) for o in top3])
print("bottom 2:", [(o["id"], o["total"]) for o in bottom2])

# merge two pre-sorted price streams
aapl = json.loads(await tools.stock_prices(symbol="AAPL"))
msft = json.loads(await tools.stock_prices(symbol="MSFT"))
merged = list(heapq.merge(sorted(aapl), sorted(msft)))
print("merged first/last:", merged[:3], merged[-2:])

heap = []
for o in orders:
    heapq.heappush(heap, (-o["total"], o["id"]))
print("pop order:", [heapq.heappop(heap)[1] for _ in range(len(heap))])
