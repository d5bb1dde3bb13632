import json

class Section:
    depth = 0

    def __init__(self, title):
        self.title = title
        self.lines = 0

    def __enter__(self):
        print("  " * Section.depth + f"▶ {self.title}")
        Section.depth += 1
        return self

    def log(self, msg):
        self.lines += 1
        print("  " * Section.depth + msg)

    def __exit__(self, exc_type, exc, tb):
        Section.depth -= 1
        status = f"failed: {exc}" if exc else f"{self.lines} items"
        print("  " * Section.depth + f"◀ {self.title} ({status})")
        return exc_type is RuntimeError

with Section("Audit") as audit:
    with Section("Users") as s:
        for u in json.loads(await tools.run_sql(query="select * from users where plan = 'pro'")):
            s.log(f"{u['name']} active={u['active']}")
    with Section("Weather") as s:
        for city in ("Paris", "Narnia", "Lima"):
            w = json.loads(await tools.get_weather(city=city))
            s.log(f"{w['city']}: {w['conditions']}")
    audit.log("done")
