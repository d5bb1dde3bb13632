import bisect
import json

breakpoints = [0, 10, 18, 25, 30]
labels = ["freezing", "cold", "cool", "warm", "hot", "scorching"]

def band(temp):
    return labels[bisect.bisect_right(breakpoints, temp)]

cities = ["Oslo", "Paris", "Tokyo", "Lima", "Lisbon", "Cairo"]
temps = []
for c in cities:
    t = json.loads(await tools.get_weather(city=c))["temp_c"]
    bisect.insort(temps, (t, c))
    print(f"{c:<7} {t:>5}°C  {band(t)}")

print("sorted:", [c for _, c in temps])
i = bisect.bisect_left([t for t, _ in temps], 20)
print(f"cities at or above 20°C: {[c for _, c in temps[i:]]}")
