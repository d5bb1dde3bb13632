import json

def flatten(obj, prefix=""):
    items = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            items.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            items.update(flatten(v, f"{prefix}{i}."))
    else:
        items[prefix[:-1]] = obj
    return items

config = json.loads(await tools.read_file(path="data/config.json"))
flat = flatten(config)
for key, value in flat.items():
    print(f"{key.upper().replace('.', '__')}={json.dumps(value)}")
return len(flat)
