import json

class Rule:
    registry = []
    severity = "info"

    def __init_subclass__(cls, severity="info", **kwargs):
        super().__init_subclass__(**kwargs)
        cls.severity = severity
        Rule.registry.append(cls)

    def check(self, user, orders):
        raise NotImplementedError

class InactiveWithOpenOrders(Rule, severity="error"):
    def check(self, user, orders):
        return not user["active"] and any(o["status"] == "pending" for o in orders)

class FreePlanBigSpender(Rule, severity="warn"):
    def check(self, user, orders):
        return user["plan"] == "free" and sum(o["total"] for o in orders) > 8

class NoOrders(Rule):
    def check(self, user, orders):
        return not orders

findings = []
for uid in range(1, 6):
    user = json.loads(await tools.get_user(user_id=uid))
    orders = json.loads(await tools.list_orders(user_id=uid))
    for rule_cls in Rule.registry:
        if rule_cls().check(user, orders):
            findings.append((rule_cls.severity, rule_cls.__name__, user["name"]))

order = {"error": 0, "warn": 1, "info": 2}
for sev, rule, name in sorted(findings, key=lambda f: (order[f[0]], f[1], f[2])):
    print(f"[{sev.upper():<5}] {rule}: {name}")
print("rules loaded:", [r.__name__ for r in Rule.registry])
