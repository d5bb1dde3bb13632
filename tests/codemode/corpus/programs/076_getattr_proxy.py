import json

class Record:
    def __init__(self, data):
        self._data = data

    def __getattr__(self, name):
        try:
            value = self._data[name]
        except KeyError:
            raise AttributeError(f"record has no field {name!r}") from None
        return Record(value) if isinstance(value, dict) else value

    def __dir__(self):
        return sorted(self._data)

cfg = Record(json.loads(await tools.read_file(path="data/config.json")))
print("service:", cfg.service, "port:", cfg.port)
print("cache on:", cfg.features.cache, "| audit on:", cfg.features.audit)
print("fields:", dir(cfg))
for name in ("retries", "timeout"):
    print(name, "=", getattr(cfg, name, "<unset>"))
try:
    cfg.features.metrics
except AttributeError as e:
    print("AttributeError:", e)
