import asyncio
import json

cities = ["Lisbon", "Paris", "Tokyo", "Cairo", "Oslo", "Lima", "Springfield"]
results = await asyncio.gather(*(tools.get_weather(city=c) for c in cities), return_exceptions=True)

ok, failed = {}, []
for city, res in zip(cities, results):
    if isinstance(res, Exception):
        failed.append(city)
    else:
        ok[city] = json.loads(res)

sunny = sorted(c for c, w in ok.items() if w["conditions"] == "sunny")
print(f"fetched {len(ok)}/{len(cities)} cities; failed: {failed}")
print("sunny:", sunny)
return {c: f"{w['temp_c']}C/{w['conditions']}" for c, w in ok.items()}
