import json

class JsonMixin:
    def to_json(self):
        return json.dumps(self.as_dict(), sort_keys=True)

class DescribeMixin:
    def describe(self):
        fields = ", ".join(f"{k}={v}" for k, v in self.as_dict().items())
        return f"{type(self).__name__}({fields})"

class Entity:
    def __init__(self, **data):
        self.data = data

    def as_dict(self):
        return dict(self.data)

class User(JsonMixin, DescribeMixin, Entity):
    def as_dict(self):
        d = super().as_dict()
        d["email"] = d["email"].split("@")[0] + "@***"
        return d

class Customer(User):
    def __init__(self, orders=(), **data):
        super().__init__(**data)
        self.orders = list(orders)

    def as_dict(self):
        d = super().as_dict()
        d["orders"] = len(self.orders)
        return d

raw = json.loads(await tools.get_user(user_id=4))
orders = json.loads(await tools.list_orders(user_id=4))
c = Customer(orders=orders, **{k: raw[k] for k in ("id", "name", "email")})
print(" -> ".join(k.__name__ for k in Customer.__mro__))
print(c.describe())
print(c.to_json())
