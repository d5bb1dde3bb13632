import json
from collections import OrderedDict

class LRU:
    def __init__(self, capacity):
        self.capacity = capacity
        self.data = OrderedDict()
        self.evicted = []

    def get(self, key):
        if key not in self.data:
            return None
        self.data.move_to_end(key)
        return self.data[key]

    def put(self, key, value):
        self.data[key] = value
        self.data.move_to_end(key)
        if len(self.data) > self.capacity:
            old, _ = self.data.popitem(last=False)
            self.evicted.append(old)

cache = LRU(capacity=3)
misses = 0
for city in ["paris", "oslo", "paris", "lima", "cairo", "oslo", "paris", "lima"]:
    w = cache.get(city)
    if w is None:
        misses += 1
        w = json.loads(await tools.get_weather(city=city))
        cache.put(city, w)
print(f"misses={misses}, evicted={cache.evicted}")
print("cache order (LRU -> MRU):", list(cache.data))
