import asyncio
import json

async def profile(uid):
    user_raw, orders_raw = await asyncio.gather(tools.get_user(user_id=uid), tools.list_orders(user_id=uid))
    user, orders = json.loads(user_raw), json.loads(orders_raw)
    return {
        "name": user["name"],
        "plan": user["plan"],
        "orders": len(orders),
        "spent": round(sum(o["total"] for o in orders if o["status"] != "cancelled"), 2),
    }

users = json.loads(await tools.run_sql(query="select id from users where active = true"))
profiles = await asyncio.gather(*(profile(u["id"]) for u in users))
for p in sorted(profiles, key=lambda p: p["spent"], reverse=True):
    print(f"{p['name']:<11} {p['plan']:<5} orders={p['orders']} spent=${p['spent']:.2f}")
return profiles
