from datetime import datetime, timedelta

log = await tools.read_file(path="logs/app.log")
events = []
for line in log.splitlines():
    ts = datetime.strptime(line[:19], "%Y-%m-%d %H:%M:%S")
    events.append((ts, line[20:]))

gaps = [(b[0] - a[0], a[1], b[1]) for a, b in zip(events, events[1:])]
longest = max(gaps, key=lambda g: g[0])
print(f"log spans {events[-1][0] - events[0][0]} ({len(events)} events)")
print(f"longest quiet period: {longest[0]} between {longest[1]!r} and {longest[2]!r}")
slow = [f"{int(g.total_seconds())}s" for g, *_ in gaps if g > timedelta(minutes=1)]
print("gaps over a minute:", slow)
print("next expected heartbeat:", (events[-1][0] + timedelta(minutes=15)).isoformat(sep=" "))
print("weekday:", events[0][0].strftime("%A %d %B %Y"))
