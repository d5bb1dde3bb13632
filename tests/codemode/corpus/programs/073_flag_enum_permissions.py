import json
from enum import Flag, IntEnum, auto

class Perm(Flag):
    READ = auto()
    WRITE = auto()
    BILLING = auto()
    ADMIN = READ | WRITE | BILLING

class Tier(IntEnum):
    FREE = 0
    PRO = 1
    TEAM = 2

PLAN_PERMS = {Tier.FREE: Perm.READ, Tier.PRO: Perm.READ | Perm.WRITE, Tier.TEAM: Perm.ADMIN}

users = json.loads(await tools.run_sql(query="select * from users"))
for u in sorted(users, key=lambda u: Tier[u["plan"].upper()], reverse=True):
    tier = Tier[u["plan"].upper()]
    perms = PLAN_PERMS[tier]
    names = [p.name for p in Perm if p in perms and p is not Perm.ADMIN]
    print(f"{u['name']:<11} tier={tier.name:<4}({int(tier)}) perms={'|'.join(names)}"
          f"{' [admin]' if perms == Perm.ADMIN else ''}")
can_bill = [u["name"] for u in users if Perm.BILLING in PLAN_PERMS[Tier[u["plan"].upper()]]]
print("can manage billing:", can_bill)
