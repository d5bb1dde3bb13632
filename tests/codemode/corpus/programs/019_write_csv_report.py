import csv
import io
import json

orders = json.loads(await tools.list_orders())
users = {u["id"]: u for u in json.loads(await tools.run_sql(query="select * from users"))}

buf = io.StringIO()
writer = csv.writer(buf, lineterminator="\n")
writer.writerow(["order_id", "customer", "country", "status", "total"])
for o in sorted(orders, key=lambda o: o["total"], reverse=True):
    u = users[o["user_id"]]
    writer.writerow([o["id"], u["name"], u["country"], o["status"], f"{o['total']:.2f}"])

print(await tools.write_file(path="reports/orders.csv", content=buf.getvalue()))
check = await tools.read_file(path="reports/orders.csv")
rows = list(csv.DictReader(io.StringIO(check)))
print(f"Verified {len(rows)} rows; top order: {rows[0]['order_id']} by {rows[0]['customer']}")
