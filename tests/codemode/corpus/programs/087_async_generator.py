import json

async def iter_user_orders(user_ids):
    for uid in user_ids:
        try:
            user = json.loads(await tools.get_user(user_id=uid))
        except RuntimeError:
            continue
        for order in json.loads(await tools.list_orders(user_id=uid)):
            yield user, order

big = []
async for user, order in iter_user_orders([1, 2, 6, 4]):
    print(f"{user['name']:<10} #{order['id']} {order['total']:>7.2f} {order['status']}")
    if order["total"] >= 50:
        big.append(order["id"])

totals = [o["total"] async for _, o in iter_user_orders([1, 4])]
print("big orders:", big)
print("users 1+4 total:", round(sum(totals), 2))
