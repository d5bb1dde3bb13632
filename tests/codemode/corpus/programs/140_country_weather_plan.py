import json

# Plan: 1) get active users 2) map country -> capital we have weather for 3) suggest outreach time
CAPITALS = {"PT": "Lisbon", "FR": "Paris", "CN": "Beijing", "IN": "Delhi", "MX": "Mexico City", "JP": "Tokyo"}
users = json.loads(await tools.run_sql(query="select * from users where active = true"))
print(f"step 1: {len(users)} active users")

suggestions = []
for u in users:
    city = CAPITALS.get(u["country"])
    try:
        w = json.loads(await tools.get_weather(city=city))
    except RuntimeError:
        suggestions.append((u["name"], city, "no weather data; send email anyway"))
        continue
    if w["conditions"] in {"rain", "snow", "cloudy"}:
        tip = "indoor day: good time for a promo email"
    else:
        tip = "sunny: schedule the email for the evening"
    suggestions.append((u["name"], city, f"{w['temp_c']}°C {w['conditions']} -> {tip}"))
print("step 2: weather fetched")

for name, city, tip in suggestions:
    print(f"  {name:<11} ({city}): {tip}")
return len(suggestions)
