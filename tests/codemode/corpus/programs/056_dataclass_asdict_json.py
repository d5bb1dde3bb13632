import json
from dataclasses import dataclass, field, asdict

@dataclass
class CitySummary:
    city: str
    temp_c: float
    tags: list[str] = field(default_factory=list)
    notes: dict = field(default_factory=dict)

summaries = []
for city in ["lisbon", "oslo", "tokyo"]:
    w = json.loads(await tools.get_weather(city=city))
    s = CitySummary(w["city"], w["temp_c"])
    if w["temp_c"] < 5:
        s.tags.append("freezing")
    if w["conditions"] in ("rain", "snow"):
        s.tags.append("bring-umbrella")
        s.notes["precip"] = w["conditions"]
    if w["humidity"] >= 80:
        s.tags.append("humid")
    summaries.append(s)

payload = json.dumps([asdict(s) for s in summaries], indent=2, sort_keys=True)
print(await tools.write_file(path="out/weather.json", content=payload))
print(payload)
