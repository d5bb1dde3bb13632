import json

async def weather(city):
    try:
        return json.loads(await tools.get_weather(city=city))
    except RuntimeError:
        return None

cities = ["tokyo", "lima", "berlin", "cairo"]
reports = [w for c in cities if (w := await weather(c)) is not None]
humid = {w["city"]: w["humidity"] for w in reports if w["humidity"] > 50}
print("reports:", [w["city"] for w in reports])
print("humid cities:", humid)
