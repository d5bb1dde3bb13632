import asyncio
import json

async def slow_tool():
    await asyncio.sleep(1)
    return "late"

outcomes = {}
try:
    async with asyncio.timeout(1):
        outcomes["orders"] = len(json.loads(await tools.list_orders()))
except TimeoutError:
    outcomes["orders"] = "timeout"

try:
    async with asyncio.timeout(0.01):
        outcomes["slow"] = await slow_tool()
except TimeoutError:
    outcomes["slow"] = "timeout"

task = asyncio.create_task(slow_tool())
await asyncio.sleep(0)
task.cancel()
try:
    await task
except asyncio.CancelledError:
    outcomes["cancelled_task"] = task.cancelled()
print(outcomes)
