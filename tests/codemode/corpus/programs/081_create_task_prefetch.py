import asyncio
import json

# start the slow-ish lookups first, do local work, then collect
orders_task = asyncio.create_task(tools.list_orders())
users_task = asyncio.create_task(tools.run_sql(query="select * from users"))
config_task = asyncio.create_task(tools.read_file(path="data/config.json"))

config = json.loads(await config_task)
print(f"config loaded for {config['service']}; audit={'on' if config['features']['audit'] else 'off'}")

orders, users = await orders_task, await users_task
orders, users = json.loads(orders), {u["id"]: u for u in json.loads(users)}
by_country = {}
for o in orders:
    c = users[o["user_id"]]["country"]
    by_country[c] = round(by_country.get(c, 0) + o["total"], 2)
print("revenue by country:", dict(sorted(by_country.items(), key=lambda kv: -kv[1])))
print("all tasks done:", all(t.done() for t in (orders_task, users_task, config_task)))
