import json
import pprint

users = json.loads(await tools.run_sql(query="select * from users"))
orders = json.loads(await tools.list_orders())
nested = {u["name"]: {"plan": u["plan"], "orders": [{"id": o["id"], "items": o["items"]} for o in orders if o["user_id"] == u["id"]]}
          for u in users if u["active"]}
print(pprint.pformat(nested, width=90, sort_dicts=True))
print(pprint.pformat(list(nested), compact=True, width=40))
