import json
from typing import NamedTuple

class Reading(NamedTuple):
    city: str
    temp_c: float
    conditions: str
    humidity: int

    @property
    def feels_hot(self) -> bool:
        return self.temp_c >= 25 or (self.temp_c >= 20 and self.humidity > 70)

readings = []
for city in ("Lisbon", "Tokyo", "Cairo", "Oslo"):
    data = json.loads(await tools.get_weather(city=city))
    readings.append(Reading(**data))

for r in sorted(readings, key=lambda r: r.humidity):
    print(r)
hot = [r.city for r in readings if r.feels_hot]
city, temp, *_ = max(readings, key=lambda r: r.temp_c)
print(f"Hottest: {city} ({temp}°C); feels hot: {hot}")
return [r._asdict() for r in readings[:2]]
