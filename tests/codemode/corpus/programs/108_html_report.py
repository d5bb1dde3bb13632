import html
import json

orders = json.loads(await tools.list_orders())
users = {u["id"]: u for u in json.loads(await tools.run_sql(query="select * from users"))}
rows = []
for o in orders:
    user = users[o["user_id"]]
    note = f"<{user['email']}> & {o['status']}"
    rows.append(f"  <tr><td>{o['id']}</td><td>{html.escape(user['name'])}</td>"
                f"<td>{html.escape(note)}</td><td>{o['total']:.2f}</td></tr>")
page = "<table>\n  <tr><th>id</th><th>customer</th><th>note</th><th>total</th></tr>\n" + "\n".join(rows) + "\n</table>"
print(await tools.write_file(path="reports/orders.html", content=page))
print("\n".join(page.splitlines()[:4]))
print(html.unescape("&lt;tr&gt; &amp;amp; &quot;ok&quot;"))
