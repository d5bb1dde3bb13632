import json

config = json.loads(await tools.read_file(path="data/config.json"))
config["owners"].append("cé")
config["features"]["audit"] = True
config["limits"] = {"rps": 12.5, "burst": None}

pretty = json.dumps(config, indent=4, sort_keys=True, ensure_ascii=False)
compact = json.dumps(config, separators=(",", ":"), sort_keys=True)
print(pretty)
print(compact)
print("ascii-escaped owner:", json.dumps(config["owners"][-1]))
print(await tools.write_file(path="data/config.json", content=pretty + "\n"))
reloaded = json.loads(await tools.read_file(path="data/config.json"))
print("reload matches:", reloaded == config)
