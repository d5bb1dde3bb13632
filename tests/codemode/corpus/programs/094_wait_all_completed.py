import asyncio
import json

tasks = {asyncio.create_task(tools.get_weather(city=c)): c for c in ["Cairo", "Oslo", "Quito", "Lisbon"]}
done, pending = await asyncio.wait(tasks, timeout=5, return_when=asyncio.ALL_COMPLETED)
print(f"done={len(done)} pending={len(pending)}")

temps = {}
for task in done:
    city = tasks[task]
    if task.exception() is not None:
        print(f"{city}: failed -> {task.exception()}")
        continue
    temps[city] = json.loads(task.result())["temp_c"]

spread = max(temps.values()) - min(temps.values())
print("temps:", dict(sorted(temps.items())))
print(f"spread: {spread:.1f}°C")
