import json

class ToolError(Exception):
    """Base class for problems talking to tools."""

class NotFound(ToolError):
    def __init__(self, kind, key):
        super().__init__(f"{kind} {key!r} not found")
        self.kind, self.key = kind, key

class InvalidData(ToolError):
    pass

async def fetch_user(uid):
    try:
        raw = await tools.get_user(user_id=uid)
    except RuntimeError as exc:
        if "not found" in str(exc):
            raise NotFound("user", uid) from exc
        raise ToolError(str(exc)) from exc
    user = json.loads(raw)
    if "@" not in user.get("email", ""):
        raise InvalidData(f"user {uid} has no valid email")
    return user

report = {"ok": [], "missing": [], "invalid": []}
for uid in [3, 42, 5, 7]:
    try:
        user = await fetch_user(uid)
        report["ok"].append(user["name"])
    except NotFound as e:
        report["missing"].append(e.key)
        print(f"{type(e).__name__}: {e} (caused by: {e.__cause__})")
    except ToolError as e:
        report["invalid"].append(str(e))
print(report)
