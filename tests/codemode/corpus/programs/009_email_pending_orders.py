import json

orders = json.loads(await tools.list_orders())
pending = [o for o in orders if o["status"] == "pending"]
print(f"{len(pending)} pending orders")

sent = []
for order in pending:
    user = json.loads(await tools.get_user(user_id=order["user_id"]))
    body = (f"Hi {user['name'].split()[0]},\n\n"
            f"Your order #{order['id']} (${order['total']:.2f}) is still pending. "
            "We'll let you know when it ships.\n")
    result = await tools.send_email(to=user["email"], subject=f"Order #{order['id']} update", body=body)
    print(result)
    sent.append(order["id"])

return {"notified_orders": sent}
