import json
users = json.loads(await tools.run_sql(query="select * from users where active = true"))
print(len(users), "active users:", ", ".join(u["name"] for u in users))
