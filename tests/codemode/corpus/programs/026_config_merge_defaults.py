import json

defaults = {"service": "unnamed", "port": 8000, "host": "0.0.0.0", "retries": 5, "timeout_s": 30,
            "features": {"cache": False, "audit": True, "metrics": True}}
config = json.loads(await tools.read_file(path="data/config.json"))

def merge(base, override):
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out

effective = merge(defaults, config)
overridden = sorted(k for k in config if k in defaults and config[k] != defaults[k])
extra = sorted(k for k in config if k not in defaults)
print("Overridden:", overridden)
print("Not in defaults:", extra)
print(json.dumps(effective, indent=2, sort_keys=True))
