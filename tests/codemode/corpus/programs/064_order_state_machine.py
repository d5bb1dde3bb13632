import json

class InvalidTransition(Exception):
    pass

class OrderFlow:
    TRANSITIONS = {
        "pending": {"shipped", "cancelled"},
        "shipped": {"delivered"},
        "delivered": set(),
        "cancelled": set(),
    }

    def __init__(self, order):
        self.order_id = order["id"]
        self.state = order["status"]
        self.history = [self.state]

    def advance(self, new_state):
        if new_state not in self.TRANSITIONS[self.state]:
            raise InvalidTransition(f"order {self.order_id}: {self.state} -> {new_state} not allowed")
        self.state = new_state
        self.history.append(new_state)

    @property
    def terminal(self):
        return not self.TRANSITIONS[self.state]

flows = {o["id"]: OrderFlow(o) for o in json.loads(await tools.list_orders())}
plan = [(102, "shipped"), (102, "delivered"), (105, "shipped"), (101, "delivered"), (106, "delivered")]
for oid, target in plan:
    try:
        flows[oid].advance(target)
    except InvalidTransition as e:
        print("rejected:", e)

for oid, flow in flows.items():
    print(f"{oid}: {' -> '.join(flow.history)}{' (final)' if flow.terminal else ''}")
