import json

class CachedClient:
    def __init__(self, tools):
        self._tools = tools
        self._cache = {}
        self.calls = 0
        self.hits = 0

    async def user(self, uid):
        key = ("user", uid)
        if key in self._cache:
            self.hits += 1
        else:
            self.calls += 1
            self._cache[key] = json.loads(await self._tools.get_user(user_id=uid))
        return self._cache[key]

    @property
    def hit_rate(self):
        total = self.calls + self.hits
        return self.hits / total if total else 0.0

client = CachedClient(tools)
orders = json.loads(await tools.list_orders())
lines = []
for o in orders:
    u = await client.user(o["user_id"])
    lines.append(f"#{o['id']} {u['name']:<11} {o['status']}")
print("\n".join(lines))
print(f"tool calls={client.calls}, cache hits={client.hits}, hit rate={client.hit_rate:.0%}")
