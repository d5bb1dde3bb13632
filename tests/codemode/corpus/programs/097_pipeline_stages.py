import asyncio
import json

raw_q, parsed_q = asyncio.Queue(), asyncio.Queue()
DONE = None

async def produce():
    for uid in [1, 2, 3, 4, 5, 6]:
        try:
            await raw_q.put(await tools.get_user(user_id=uid))
        except RuntimeError as e:
            print("producer skipped:", e)
    await raw_q.put(DONE)

async def parse():
    while (item := await raw_q.get()) is not DONE:
        user = json.loads(item)
        if user["active"]:
            await parsed_q.put(user)
    await parsed_q.put(DONE)

async def sink():
    out = []
    while (user := await parsed_q.get()) is not DONE:
        orders = json.loads(await tools.list_orders(user_id=user["id"]))
        out.append((user["name"], len(orders)))
    return out

_, _, rows = await asyncio.gather(produce(), parse(), sink())
for name, n in rows:
    print(f"{name}: {n} order(s)")
