import json

cities = ["Oslo", "Paris", "Lima", "Cairo"]
out = []
for c in cities:
    data = json.loads(await tools.get_weather(city=c))
    data["temp_f"] = round(data["temp_c"] * 9 / 5 + 32, 1)
    out.append(data)

out.sort(key=lambda d: d["temp_f"])
for d in out:
    print(f"{d['city']:<6} {d['temp_c']:>5.1f}°C = {d['temp_f']:>5.1f}°F, {d['conditions']}")
return {d["city"]: d["temp_f"] for d in out}
