import json
w = json.loads(await tools.get_weather(city="Tokyo"))
return f"{w['city']}: {w['temp_c']}°C, {w['conditions']}, humidity {w['humidity']}%"
