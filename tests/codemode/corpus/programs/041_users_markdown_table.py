import json

users = json.loads(await tools.run_sql(query="select * from users"))
cols = ["id", "name", "email", "plan", "country", "active"]
widths = {c: max(len(c), *(len(str(u[c])) for u in users)) for c in cols}
print("| " + " | ".join(c.ljust(widths[c]) for c in cols) + " |")
print("|" + "|".join("-" * (widths[c] + 2) for c in cols) + "|")
for u in users:
    cells = ["✓" if u[c] is True else "✗" if u[c] is False else str(u[c]) for c in cols]
    print("| " + " | ".join(cell.ljust(widths[c]) for cell, c in zip(cells, cols)) + " |")
