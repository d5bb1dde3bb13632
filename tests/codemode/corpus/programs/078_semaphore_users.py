import asyncio
import json

sem = asyncio.Semaphore(2)
active = 0
peak = 0
started = 0

async def fetch(uid):
    nonlocal active, peak, started
    started += 1
    async with sem:
        active += 1
        peak = max(peak, active)
        try:
            return json.loads(await tools.get_user(user_id=uid))
        except RuntimeError:
            return None
        finally:
            active -= 1

users = await asyncio.gather(*(fetch(uid) for uid in range(1, 8)))
found = [u for u in users if u]
print(f"started {started} fetches, peak concurrency {peak} (limit 2)")
print(f"{len(found)} users found: {[u['name'] for u in found]}")
