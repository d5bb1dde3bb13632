import json
import uuid

NAMESPACE = uuid.uuid5(uuid.NAMESPACE_DNS, "inventory.example.com")
users = json.loads(await tools.run_sql(query="select * from users"))
mapping = {}
for u in users:
    uid = uuid.uuid5(NAMESPACE, u["email"])
    mapping[u["email"]] = str(uid)
    print(f"{u['email']:<20} {uid}  v{uid.version}")

legacy = uuid.uuid3(uuid.NAMESPACE_URL, "https://example.com/users/1")
print("legacy id for user 1:", legacy.hex)
return {"namespace": str(NAMESPACE), "count": len(mapping)}
