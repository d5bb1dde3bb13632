import json

# Thought: the user asked which customer has spent the most on non-cancelled orders, and their country.
orders = json.loads(await tools.list_orders())
totals = {}
for o in orders:
    if o["status"] != "cancelled":
        totals[o["user_id"]] = totals.get(o["user_id"], 0) + o["total"]
print("totals:", totals)
top_id = max(totals, key=totals.get)
user = json.loads(await tools.get_user(user_id=top_id))
final_answer = f"{user['name']} ({user['country']}) spent ${totals[top_id]:.2f}"
print(final_answer)
return final_answer
