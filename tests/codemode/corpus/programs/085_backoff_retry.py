import asyncio
import json

async def call_with_backoff(fn, *, retries=4, base=0.001, **kwargs):
    delay = base
    for attempt in range(retries):
        try:
            return await fn(**kwargs)
        except RuntimeError as exc:
            if attempt == retries - 1:
                raise
            print(f"  attempt {attempt + 1} failed ({exc}); sleeping {delay * 1000:.0f}ms")
            await asyncio.sleep(delay)
            delay *= 2

flaky_paths = iter(["data/sales_v2.csv", "data/sales.v2.csv", "data/sales.csv"])

async def read_sales():
    return await tools.read_file(path=next(flaky_paths))

text = await call_with_backoff(read_sales)
print(f"read {len(text.splitlines()) - 1} sales rows")

try:
    await call_with_backoff(tools.get_user, retries=3, user_id=404)
except RuntimeError as e:
    print("final failure:", e)

w = json.loads(await call_with_backoff(tools.get_weather, city="Oslo"))
print(f"Oslo: {w['temp_c']}°C")
