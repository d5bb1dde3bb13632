import asyncio
import json

results = {}

async def load(name, coro):
    results[name] = await coro

async with asyncio.TaskGroup() as tg:
    tg.create_task(load("readme", tools.read_file(path="README.md")))
    tg.create_task(load("config", tools.read_file(path="data/config.json")))
    tg.create_task(load("commits", tools.bash(command="git log --oneline -3")))
    tg.create_task(load("search", tools.search_web(query="ray actors", limit=2)))

title = results["readme"].splitlines()[0].lstrip("# ")
config = json.loads(results["config"])
commits = results["commits"].splitlines()
hits = json.loads(results["search"])
print(f"Project {title!r} (service={config['service']}, port={config['port']})")
print(f"Latest commit: {commits[0]}")
print(f"Related reading: {hits[0]['title']} <{hits[0]['url']}>")

try:
    async with asyncio.TaskGroup() as tg:
        tg.create_task(tools.get_weather(city="Lisbon"))
        tg.create_task(tools.get_weather(city="Mordor"))
except* RuntimeError as eg:
    print(f"task group failed with {len(eg.exceptions)} error(s): {eg.exceptions[0]}")
