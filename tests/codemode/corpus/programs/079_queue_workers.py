import asyncio
import json

queue = asyncio.Queue()
for path in json.loads(await tools.list_files()):
    queue.put_nowait(path)

results = {}

async def worker(name):
    handled = 0
    while True:
        try:
            path = queue.get_nowait()
        except asyncio.QueueEmpty:
            return name, handled
        content = await tools.read_file(path=path)
        results[path] = {"bytes": len(content.encode()), "lines": content.count("\n")}
        handled += 1
        queue.task_done()

done = await asyncio.gather(*(worker(f"w{i}") for i in range(3)))
print("per worker:", dict(done))
for path in sorted(results):
    print(f"{path:<18} {results[path]['lines']:>3} lines {results[path]['bytes']:>5} bytes")
print("total bytes:", sum(r["bytes"] for r in results.values()))
