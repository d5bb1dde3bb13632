import asyncio
import json

requests = {
    "north": tools.run_sql(query="select * from users where country = 'pt'"),
    "pending": tools.run_sql(query="select * from orders where status = 'pending'"),
    "team": tools.run_sql(query="select * from users where plan = 'team'"),
    "apple": tools.stock_prices(symbol="aapl"),
}
values = dict(zip(requests, await asyncio.gather(*requests.values())))
data = {k: json.loads(v) for k, v in values.items()}
print("PT users:", [u["name"] for u in data["north"]])
print("pending orders:", [(o["id"], o["total"]) for o in data["pending"]])
print("team plan:", [u["email"] for u in data["team"]])
print(f"AAPL avg close: {sum(data['apple']) / len(data['apple']):.2f}")
return {k: len(v) for k, v in data.items()}
