import json

readme = await tools["read_file"]({"path": "README.md"})
weather = json.loads(await tools["get_weather"]({"city": "Lisbon"}))
hits = json.loads(await tools["search_web"]({"query": "asyncio", "limit": 1}))
print(readme.splitlines()[0])
print(f"Lisbon: {weather['temp_c']}°C, {weather['conditions']}")
print(f"Top hit: {hits[0]['title']}")
