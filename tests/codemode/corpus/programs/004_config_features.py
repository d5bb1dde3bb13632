import json

config = json.loads(await tools.read_file(path="data/config.json"))
enabled = [name for name, on in config.get("features", {}).items() if on]
disabled = [name for name, on in config.get("features", {}).items() if not on]

print(f"Service: {config['service']} on port {config['port']}")
print(f"Enabled features: {enabled}")
print(f"Disabled features: {disabled}")
print(f"Owners: {' & '.join(config['owners'])}, retries={config.get('retries', 0)}")
