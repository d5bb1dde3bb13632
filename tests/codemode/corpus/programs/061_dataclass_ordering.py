import json
from dataclasses import dataclass, field

@dataclass(order=True)
class Ticket:
    priority: int
    created: str = field(compare=True)
    message: str = field(compare=False)
    level: str = field(compare=False, default="INFO")

PRIORITY = {"ERROR": 0, "WARN": 1, "INFO": 2}
log = await tools.read_file(path="logs/app.log")
tickets = []
for line in log.splitlines():
    date, time, level, message = line.split(" ", 3)
    if level != "INFO":
        tickets.append(Ticket(PRIORITY[level], f"{date}T{time}", message, level))

for t in sorted(tickets):
    print(f"P{t.priority} {t.created} {t.level:<5} {t.message}")
print("first ticket is urgent:", min(tickets).priority == 0)
print("ERROR ticket sorts before WARN:", tickets[1] < tickets[0])
