import base64
import json

raw = await tools.read_file(path="data/config.json")
compact = json.dumps(json.loads(raw), separators=(",", ":"))
token = base64.urlsafe_b64encode(compact.encode()).decode().rstrip("=")
print(f"original {len(raw)} chars -> compact {len(compact)} -> token {len(token)}")
print("token:", token[:48] + "...")

padded = token + "=" * (-len(token) % 4)
decoded = json.loads(base64.urlsafe_b64decode(padded))
print("roundtrip ok:", decoded == json.loads(raw))
print("b16 of service name:", base64.b16encode(decoded["service"].encode()).decode())
