import asyncio
import json

async def with_timeout(coro, seconds, default=None):
    try:
        return await asyncio.wait_for(coro, timeout=seconds)
    except asyncio.TimeoutError:
        print("timed out; using default")
        return default

async def slow_lookup():
    await asyncio.sleep(5)
    return "never"

prices = json.loads(await with_timeout(tools.stock_prices(symbol="MSFT"), seconds=2, default="[]"))
slow = await with_timeout(slow_lookup(), seconds=0.01, default="fallback")
print(f"MSFT last={prices[-1]} high={max(prices)}")
print("slow lookup ->", slow)
