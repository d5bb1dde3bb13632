import json

class Thermostat:
    MIN, MAX = 10.0, 30.0

    def __init__(self, city, target):
        self.city = city
        self._target = None
        self.target = target

    @property
    def target(self):
        return self._target

    @target.setter
    def target(self, value):
        if not self.MIN <= value <= self.MAX:
            raise ValueError(f"{value} outside [{self.MIN}, {self.MAX}]")
        self._target = round(value * 2) / 2

    def action(self, current):
        delta = self.target - current
        if abs(delta) < 1:
            return "hold"
        return f"heat +{delta:.1f}" if delta > 0 else f"cool {delta:.1f}"

for city, wanted in [("Oslo", 21.3), ("Cairo", 22), ("Tokyo", 35), ("Lima", 19.2)]:
    w = json.loads(await tools.get_weather(city=city))
    try:
        t = Thermostat(city, wanted)
    except ValueError as e:
        print(f"{city}: invalid target ({e})")
        continue
    print(f"{city}: outside {w['temp_c']}°C, target {t.target}°C -> {t.action(w['temp_c'])}")
