import functools
import json

attempts = {}

def retry(times=3, exceptions=(RuntimeError,)):
    def decorator(fn):
        @functools.wraps(fn)
        async def wrapper(*args, **kwargs):
            last = None
            for attempt in range(1, times + 1):
                attempts[fn.__name__] = attempts.get(fn.__name__, 0) + 1
                try:
                    return await fn(*args, **kwargs)
                except exceptions as exc:
                    last = exc
                    print(f"{fn.__name__} attempt {attempt} failed: {exc}")
            raise last
        return wrapper
    return decorator

candidates = iter(["logs/app.log.1", "logs/app.log.0", "logs/app.log"])

@retry(times=3)
async def read_latest_log():
    """Try rotated log names until one exists."""
    return await tools.read_file(path=next(candidates))

@retry(times=2)
async def weather(city):
    return json.loads(await tools.get_weather(city=city))

log = await read_latest_log()
print(f"got log with {len(log.splitlines())} lines via {read_latest_log.__name__!r}: {read_latest_log.__doc__}")
try:
    await weather("Gotham")
except RuntimeError as e:
    print("giving up:", e)
print("attempts:", attempts)
