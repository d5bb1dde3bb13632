import asyncio
import functools
import json

class TransientError(Exception):
    pass

class PermanentError(Exception):
    pass

def classify(exc):
    msg = str(exc)
    if "not found" in msg or "unknown" in msg:
        return PermanentError(msg)
    return TransientError(msg)

def resilient(retries=2):
    def deco(fn):
        @functools.wraps(fn)
        async def inner(*a, **kw):
            for i in range(retries + 1):
                try:
                    return await fn(*a, **kw)
                except RuntimeError as exc:
                    err = classify(exc)
                    if isinstance(err, PermanentError) or i == retries:
                        raise err from exc
                    await asyncio.sleep(0)
        return inner
    return deco

@resilient(retries=2)
async def get_city(city):
    return json.loads(await tools.get_weather(city=city))

async def safe(city):
    try:
        w = await get_city(city)
        return f"{city}: {w['conditions']}"
    except PermanentError as e:
        return f"{city}: permanent failure ({e})"

for line in await asyncio.gather(*(safe(c) for c in ["Lima", "Wakanda", "Paris"])):
    print(line)
print("wrapped name:", get_city.__name__)
