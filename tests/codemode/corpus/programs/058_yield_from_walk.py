import json

def walk(node, path=()):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from walk(value, path + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from walk(value, path + (f"[{i}]",))
    else:
        yield path, node

config = json.loads(await tools.read_file(path="data/config.json"))
orders = json.loads(await tools.list_orders(user_id=4))
doc = {"config": config, "orders": orders}

leaves = list(walk(doc))
print(f"{len(leaves)} leaves")
for path, value in leaves:
    if isinstance(value, bool) or (isinstance(value, (int, float)) and value > 100):
        print("/".join(path), "=", value)
