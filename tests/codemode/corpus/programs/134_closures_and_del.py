import json

def make_counter():
    counts = {}
    def count(key, n=1):
        counts[key] = counts.get(key, 0) + n
        return counts[key]
    count.snapshot = lambda: dict(counts)
    return count

def make_threshold(limit):
    return lambda x: x >= limit

count = make_counter()
is_big = make_threshold(50)
orders = json.loads(await tools.list_orders())
for o in orders:
    count(o["status"])
    if is_big(o["total"]):
        count("big")

stats = count.snapshot()
print("counts:", stats)
del stats["big"]
print("statuses only:", stats)

cache = {o["id"]: o for o in orders}
for oid in [o for o in cache if cache[o]["status"] == "cancelled"]:
    del cache[oid]
print("remaining ids:", list(cache))
first, *middle, last = sorted(cache)
print(f"first={first} last={last} middle={middle}")
del first, last
print("locals cleaned:", "first" not in dir())
