import asyncio
import json

config_ready = asyncio.Event()
shared = {}
events = []

async def loader():
    shared["config"] = json.loads(await tools.read_file(path="data/config.json"))
    events.append("config loaded")
    config_ready.set()

async def consumer(name, city):
    weather = json.loads(await tools.get_weather(city=city))
    events.append(f"{name} fetched weather")
    await config_ready.wait()
    retries = shared["config"]["retries"]
    return f"{name}: {weather['city']} {weather['temp_c']}°C (retries={retries})"

out = await asyncio.gather(consumer("a", "Paris"), consumer("b", "Oslo"), loader())
for line in out[:2]:
    print(line)
print("config loaded before any consumer finished:", config_ready.is_set())
print(sorted(events))
