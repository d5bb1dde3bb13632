import json
import random

rng = random.Random(42)
users = json.loads(await tools.run_sql(query="select * from users where active = true"))
sample = rng.sample(users, k=2)
print("survey sample:", [u["name"] for u in sample])

variants = {u["id"]: rng.choice(["A", "B"]) for u in users}
print("A/B assignment:", variants)

orders = json.loads(await tools.list_orders())
boot = []
for _ in range(200):
    resample = [rng.choice(orders)["total"] for _ in orders]
    boot.append(sum(resample) / len(resample))
boot.sort()
print(f"bootstrap mean order value 90% CI: [{boot[10]:.2f}, {boot[189]:.2f}]")
deck = list(range(1, 11))
rng.shuffle(deck)
print("shuffled:", deck)
