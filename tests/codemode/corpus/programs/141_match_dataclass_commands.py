import json
from dataclasses import dataclass

@dataclass
class Read:
    path: str

@dataclass
class Weather:
    city: str

@dataclass
class Sql:
    query: str
    limit: int = 3

def parse(line):
    verb, _, arg = line.partition(" ")
    return {"read": Read, "weather": Weather, "sql": Sql}.get(verb, lambda a: None)(arg)

async def execute(cmd):
    match cmd:
        case Read(path=p) if p.endswith(".json"):
            return sorted(json.loads(await tools.read_file(path=p)))
        case Read(p):
            return (await tools.read_file(path=p)).splitlines()[0]
        case Weather(city):
            w = json.loads(await tools.get_weather(city=city))
            return f"{w['temp_c']}°C"
        case Sql(query=q, limit=n):
            return [r["id"] for r in json.loads(await tools.run_sql(query=q))][:n]
        case None:
            return "unknown command"

script = ["read data/config.json", "read logs/app.log", "weather cairo", "sql select * from orders", "dance now"]
for line in script:
    try:
        print(f"{line!r:30} => {await execute(parse(line))}")
    except RuntimeError as e:
        print(f"{line!r:30} => error: {e}")
