import json

shipped = json.loads(await tools.run_sql(query="SELECT id, user_id, total FROM orders WHERE status = 'shipped'"))
print(f"{len(shipped)} shipped orders")
for row in shipped:
    user = json.loads(await tools.get_user(user_id=row["user_id"]))
    print(f"  #{row['id']}: ${row['total']:>7.2f} -> {user['name']} ({user['country']})")
print(f"Shipped value: ${sum(r['total'] for r in shipped):,.2f}")
