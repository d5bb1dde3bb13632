import json

orders = json.loads(await tools.list_orders())
total_value = sum(o["total"] for o in orders)
statuses = sorted({o["status"] for o in orders})
report = []
for status in statuses:
    subset = [o for o in orders if o["status"] == status]
    value = sum(o["total"] for o in subset)
    report.append((status, len(subset), value, value / total_value))

print(f"{'status':<10}{'count':>6}{'value':>10}{'share':>8}")
for status, count, value, share in report:
    print(f"{status:<10}{count:>6}{value:>10.2f}{share:>8.1%}")
print(f"{'all':<10}{len(orders):>6}{total_value:>10.2f}{1:>8.1%}")
