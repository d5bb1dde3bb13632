import json

COMMANDS = {}

def command(name, *, help=""):
    def register(fn):
        COMMANDS[name] = (fn, help)
        return fn
    return register

@command("users", help="count users by country")
async def users_cmd():
    users = json.loads(await tools.run_sql(query="select * from users"))
    return ", ".join(sorted(u["country"] for u in users))

@command("weather", help="current weather in lisbon")
async def weather_cmd():
    w = json.loads(await tools.get_weather(city="lisbon"))
    return f"{w['temp_c']}°C {w['conditions']}"

@command("tests", help="run the test suite")
async def tests_cmd():
    return (await tools.bash(command="pytest")).splitlines()[-1]

async def dispatch(line):
    name, *args = line.split()
    if name == "help":
        return "\n".join(f"  {n:<8} {h}" for n, (_, h) in sorted(COMMANDS.items()))
    if name not in COMMANDS:
        return f"unknown command {name!r}; try 'help'"
    fn, _ = COMMANDS[name]
    return await fn(*args)

for line in ["help", "users", "weather", "deploy prod", "tests"]:
    print(f"$ {line}\n{await dispatch(line)}")
