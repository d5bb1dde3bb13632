import asyncio
import json

lock = asyncio.Lock()
totals = {"orders": 0, "revenue": 0.0, "items": 0}
log = []

async def tally(uid):
    orders = json.loads(await tools.list_orders(user_id=uid))
    for o in orders:
        async with lock:
            snapshot = totals["revenue"]
            await asyncio.sleep(0)  # yield while holding the lock
            totals["revenue"] = round(snapshot + o["total"], 2)
            totals["orders"] += 1
            totals["items"] += sum(i["qty"] for i in o["items"])
    log.append(uid)

await asyncio.gather(*(tally(u) for u in [1, 2, 3, 4, 5]))
print("users tallied:", sorted(log))
print(totals)
expected = sum(o["total"] for o in json.loads(await tools.list_orders()))
print("matches direct sum:", abs(totals["revenue"] - expected) < 1e-9)
