import asyncio
import json

STOP = object()
jobs = asyncio.Queue()
results = asyncio.Queue()

async def worker(wid):
    while True:
        job = await jobs.get()
        if job is STOP:
            jobs.task_done()
            break
        kind, arg = job
        try:
            if kind == "user":
                value = json.loads(await tools.get_user(user_id=arg))["name"]
            elif kind == "weather":
                value = json.loads(await tools.get_weather(city=arg))["conditions"]
            else:
                value = await tools.translate(text=arg, target="pt")
            await results.put((kind, arg, value, None))
        except RuntimeError as e:
            await results.put((kind, arg, None, str(e)))
        finally:
            if job is not STOP:
                jobs.task_done()

pool = [asyncio.create_task(worker(i)) for i in range(3)]
for job in [("user", 1), ("weather", "Lima"), ("translate", "good morning"), ("user", 9), ("weather", "Tokyo")]:
    await jobs.put(job)
for _ in pool:
    await jobs.put(STOP)
await jobs.join()
await asyncio.gather(*pool)

collected = []
while not results.empty():
    collected.append(results.get_nowait())
for kind, arg, value, err in sorted(collected, key=lambda r: (r[0], str(r[1]))):
    print(f"{kind:<9} {str(arg):<13} -> {value if err is None else 'ERROR ' + err}")
