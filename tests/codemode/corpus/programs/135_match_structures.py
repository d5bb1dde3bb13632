import json

def describe(event):
    match event:
        case {"type": "order", "status": "pending" | "shipped" as s, "total": float(t) | int(t)} if t > 100:
            return f"big open order ({s}) worth {t}"
        case {"type": "order", "status": status}:
            return f"order is {status}"
        case {"type": "weather", "conditions": "rain" | "snow" as c, **rest}:
            return f"bad weather ({c}) in {rest.get('city', '?')}"
        case {"type": "weather", "city": city}:
            return f"weather fine in {city}"
        case [first, *others]:
            return f"batch of {1 + len(others)} starting with {describe(first)!r}"
        case str() as text if text.startswith("ERROR"):
            return "log error: " + text[6:]
        case _:
            return "unrecognised"

orders = json.loads(await tools.list_orders())
events = [{"type": "order", **orders[3]}, {"type": "order", **orders[1]}]
for city in ("Tokyo", "Cairo"):
    events.append({"type": "weather", **json.loads(await tools.get_weather(city=city))})
events.append(events[:2])
log = (await tools.read_file(path="logs/app.log")).splitlines()
events.append(log[2].split(" ", 2)[2])
events.append(42)
for e in events:
    print(describe(e))
