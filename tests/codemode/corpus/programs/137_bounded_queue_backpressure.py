import asyncio
import json

queue = asyncio.Queue(maxsize=2)
max_seen = 0
processed = []

async def producer(paths):
    nonlocal max_seen
    for p in paths:
        await queue.put(p)
        max_seen = max(max_seen, queue.qsize())
    for _ in range(2):
        await queue.put(None)

async def consumer(tag):
    while (path := await queue.get()) is not None:
        try:
            text = await tools.read_file(path=path)
            processed.append((path, text.count("\n"), tag))
        except RuntimeError as e:
            processed.append((path, -1, tag))

paths = json.loads(await tools.list_files(directory="src")) + ["src/missing.py", "README.md"]
await asyncio.gather(producer(paths), consumer("c1"), consumer("c2"))
print(f"queue never held more than {max_seen} items (maxsize={queue.maxsize})")
for path, lines, _ in sorted(processed):
    print(f"{path:<16} {'MISSING' if lines < 0 else f'{lines} lines'}")
