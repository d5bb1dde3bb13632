import json

def comfort(temp, humidity):
    if temp < 5:
        return "cold"
    if temp > 28 and humidity < 30:
        return "hot & dry"
    if humidity > 80:
        return "muggy" if temp > 15 else "damp"
    return "pleasant" if 16 <= temp <= 25 else "mild"

rows = []
for city in ["lisbon", "paris", "tokyo", "cairo", "oslo", "lima"]:
    w = json.loads(await tools.get_weather(city=city))
    rows.append((w["city"], w["temp_c"], w["humidity"], comfort(w["temp_c"], w["humidity"])))

print(f"{'City':<8} {'Temp':>6} {'Hum':>5}  Verdict")
for city, t, h, verdict in sorted(rows, key=lambda r: r[1], reverse=True):
    print(f"{city:<8} {t:>5.1f}C {h:>4}%  {verdict}")
pleasant = [r[0] for r in rows if r[3] == "pleasant"]
print("Best picks:", pleasant or "none")
