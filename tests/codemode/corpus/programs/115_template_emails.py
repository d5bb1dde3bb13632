import json
from string import Template

tmpl = Template("Hi $first,\n\nYou have $count order(s) totalling $$${total}. Your plan: ${plan}.\n\n- The $service team")
config = json.loads(await tools.read_file(path="data/config.json"))
sent = 0
for uid in (1, 4):
    user = json.loads(await tools.get_user(user_id=uid))
    orders = json.loads(await tools.list_orders(user_id=uid))
    body = tmpl.substitute(first=user["name"].split()[0], count=len(orders),
                           total=f"{sum(o['total'] for o in orders):.2f}", plan=user["plan"],
                           service=config["service"])
    print(body)
    print("->", await tools.send_email(to=user["email"], subject="Your monthly summary", body=body))
    sent += 1

partial = Template("Dear $name, your code is $code").safe_substitute(name="Bo")
print(partial)
print(f"sent {sent} emails")
