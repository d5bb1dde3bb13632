import json

cities = ["Lisbon", "Paris", "Tokyo", "Cairo", "Oslo", "Lima", "Atlantis"]
readings = {}
for city in cities:
    try:
        readings[city] = json.loads(await tools.get_weather(city=city))
    except RuntimeError as e:
        print(f"Skipping {city}: {e}")

warmest = max(readings.values(), key=lambda r: r["temp_c"])
coldest = min(readings.values(), key=lambda r: r["temp_c"])
print(f"Warmest: {warmest['city']} at {warmest['temp_c']}°C ({warmest['conditions']})")
print(f"Coldest: {coldest['city']} at {coldest['temp_c']}°C ({coldest['conditions']})")
avg = sum(r["temp_c"] for r in readings.values()) / len(readings)
print(f"Average across {len(readings)} cities: {avg:.1f}°C")
