"""A corpus of realistic model-written Code Mode programs, and the tools they call.

Each file in ``programs/`` is one program as a model would send it to ``run_code`` (the
body of an async function: top-level ``await`` and ``return``), written in the styles of
public code-agent prompts and trajectories. A program is *run correctly* by a backend when
its printed lines and returned value are exactly what plain CPython gives for the same
program against the same tools (:func:`oracle`, run unsandboxed in the test process on
trusted corpus code), with no error.

The tools are a small deterministic world (files, users and orders, weather, web search,
SQL rows, a shell): every binding answers a string, JSON text for structured data, as
tools do through ``run_code``.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
from pathlib import Path
from typing import Any

PROGRAMS = Path(__file__).with_name("programs")

FILES = {
    "README.md": "# inventory-service\n\nA small service that tracks stock levels.\n\n## Usage\n\nRun `make serve`.\n",
    "src/app.py": ("import os\n\nDEBUG = False\n\n\ndef main():\n    # TODO: read config from env\n"
                   "    print('serving')\n\n\ndef helper(x):\n    return x * 2  # TODO: remove\n"),
    "src/models.py": ("from dataclasses import dataclass\n\n\n@dataclass\nclass Item:\n    sku: str\n    qty: int\n\n"
                      "\n@dataclass\nclass Order:\n    id: int\n    items: list\n"),
    "src/utils.py": "def slugify(text):\n    return text.lower().replace(' ', '-')\n\n\ndef clamp(v, lo, hi):\n    return max(lo, min(hi, v))\n",
    "tests/test_app.py": "from src.app import helper\n\n\ndef test_helper():\n    assert helper(2) == 4\n",
    "data/sales.csv": ("date,region,product,units,price\n2024-01-03,north,widget,12,2.50\n2024-01-03,south,gadget,3,10.00\n"
                       "2024-01-04,north,gadget,7,10.00\n2024-01-05,east,widget,20,2.50\n2024-01-05,south,widget,5,2.50\n"
                       "2024-01-06,east,gizmo,2,45.00\n2024-01-07,north,gizmo,1,45.00\n2024-01-07,south,gadget,9,10.00\n"),
    "data/config.json": json.dumps({"service": "inventory", "port": 8080, "features": {"cache": True, "audit": False},
                                    "owners": ["ana", "bo"], "retries": 3}, indent=2),
    "logs/app.log": ("2024-01-07 10:00:01 INFO started pid=311\n2024-01-07 10:00:05 WARN slow query took=1200ms\n"
                     "2024-01-07 10:01:10 ERROR db timeout after 30s\n2024-01-07 10:02:00 INFO request path=/items status=200\n"
                     "2024-01-07 10:02:03 ERROR upstream 502 from payments\n2024-01-07 10:03:30 INFO request path=/orders status=201\n"
                     "2024-01-07 10:04:00 WARN retrying payments attempt=2\n2024-01-07 10:05:00 INFO shutdown\n"),
}
USERS = [
    {"id": 1, "name": "Ana Silva", "email": "ana@example.com", "plan": "pro", "country": "PT", "active": True},
    {"id": 2, "name": "Bo Chen", "email": "bo@example.com", "plan": "free", "country": "CN", "active": True},
    {"id": 3, "name": "Carla Diaz", "email": "carla@example.org", "plan": "pro", "country": "MX", "active": False},
    {"id": 4, "name": "Dev Patel", "email": "dev@example.com", "plan": "team", "country": "IN", "active": True},
    {"id": 5, "name": "Eve Martin", "email": "eve@example.net", "plan": "free", "country": "FR", "active": True},
]
ORDERS = [
    {"id": 101, "user_id": 1, "total": 42.5, "status": "shipped", "items": [{"sku": "W-1", "qty": 2}, {"sku": "G-7", "qty": 1}]},
    {"id": 102, "user_id": 2, "total": 10.0, "status": "pending", "items": [{"sku": "G-7", "qty": 1}]},
    {"id": 103, "user_id": 1, "total": 99.99, "status": "delivered", "items": [{"sku": "Z-3", "qty": 1}]},
    {"id": 104, "user_id": 4, "total": 250.0, "status": "shipped", "items": [{"sku": "W-1", "qty": 10}, {"sku": "Z-3", "qty": 2}]},
    {"id": 105, "user_id": 5, "total": 5.25, "status": "cancelled", "items": [{"sku": "W-1", "qty": 1}]},
    {"id": 106, "user_id": 4, "total": 75.0, "status": "pending", "items": [{"sku": "G-7", "qty": 3}]},
]
WEATHER = {"lisbon": (21.5, "sunny", 60), "paris": (14.0, "cloudy", 72), "tokyo": (18.2, "rain", 88),
           "cairo": (31.0, "sunny", 20), "oslo": (2.5, "snow", 80), "lima": (19.0, "cloudy", 77)}
PAGES = [
    {"title": "Python asyncio tutorial", "url": "https://docs.example.org/asyncio", "snippet": "Learn async/await and gather.", "score": 0.92},
    {"title": "Understanding Ray actors", "url": "https://ray.example.io/actors", "snippet": "Actors hold state across calls.", "score": 0.88},
    {"title": "JSON in Python", "url": "https://docs.example.org/json", "snippet": "json.loads and json.dumps explained.", "score": 0.75},
    {"title": "Regular expressions HOWTO", "url": "https://docs.example.org/re", "snippet": "Patterns, groups and flags.", "score": 0.71},
    {"title": "Tool use for LLM agents", "url": "https://blog.example.com/tools", "snippet": "Agents call tools via code.", "score": 0.95},
]
PRICES = {"AAPL": [189.2, 190.1, 188.7, 191.5, 193.0], "MSFT": [410.0, 412.3, 409.8, 415.2, 418.9],
          "TSLA": [240.1, 236.4, 244.9, 239.0, 250.3]}


def _rows(query: str) -> list[dict[str, Any]]:
    q = query.lower()
    if "from orders" in q:
        rows = ORDERS
    elif "from users" in q:
        rows = USERS
    else:
        raise ValueError(f"unknown table in query: {query}")
    match = re.search(r"where\s+(\w+)\s*=\s*'?(\w+)'?", q)
    if match:
        key, value = match.groups()
        rows = [r for r in rows if str(r.get(key)).lower() == value]
    return [{k: v for k, v in r.items() if k != "items"} for r in rows]


def _bash(command: str) -> str:
    if command.startswith("ls"):
        return "\n".join(sorted({p.split("/")[0] for p in FILES}))
    if command.startswith("git log"):
        return "a1b2c3d fix: handle empty cart\n9f8e7d6 feat: add audit log\n5c4b3a2 chore: bump deps"
    if command.startswith("pytest"):
        return "collected 3 items\n\ntests/test_app.py ..F\n\n1 failed, 2 passed in 0.12s"
    if command.startswith("wc -l"):
        path = command.split()[-1]
        return f"{FILES.get(path, '').count(chr(10))} {path}"
    return f"bash: {command.split()[0]}: command not found"


async def _answer(name: str, args: dict[str, Any], written: dict[str, str]) -> str:
    if name == "read_file":
        path = args["path"]
        if path in written:
            return written[path]
        if path not in FILES:
            raise RuntimeError(f"Error: no such file: {path}")
        return FILES[path]
    if name == "list_files":
        prefix = args.get("directory", "").rstrip("/")
        names = sorted(set(FILES) | set(written))
        return json.dumps([p for p in names if not prefix or p.startswith(prefix + "/")])
    if name == "write_file":
        written[args["path"]] = args["content"]
        return f"wrote {len(args['content'])} bytes to {args['path']}"
    if name == "search_web":
        words = args["query"].lower().split()
        hits = [p for p in PAGES if any(w in (p["title"] + " " + p["snippet"]).lower() for w in words)]
        return json.dumps(hits[: args.get("limit", 5)])
    if name == "get_weather":
        city = args["city"].lower()
        if city not in WEATHER:
            raise RuntimeError(f"Error: unknown city {args['city']!r}")
        temp, conditions, humidity = WEATHER[city]
        return json.dumps({"city": args["city"].title(), "temp_c": temp, "conditions": conditions, "humidity": humidity})
    if name == "get_user":
        found = [u for u in USERS if u["id"] == args["user_id"]]
        if not found:
            raise RuntimeError(f"Error: user {args['user_id']} not found")
        return json.dumps(found[0])
    if name == "list_orders":
        return json.dumps([o for o in ORDERS if args.get("user_id") in (None, o["user_id"])])
    if name == "run_sql":
        return json.dumps(_rows(args["query"]))
    if name == "stock_prices":
        return json.dumps(PRICES.get(args["symbol"].upper(), []))
    if name == "bash":
        return _bash(args["command"])
    if name == "send_email":
        return f"queued email to {args['to']} ({len(args.get('body', ''))} chars)"
    if name == "translate":
        table = {"hello": "olá", "world": "mundo", "thanks": "obrigado", "good": "bom", "morning": "manhã"}
        return " ".join(table.get(w, w) for w in args["text"].lower().split())
    raise RuntimeError(f"Error: unknown tool {name}")


TOOL_NAMES = ("bash", "get_user", "get_weather", "list_files", "list_orders", "read_file", "run_sql",
              "search_web", "send_email", "stock_prices", "translate", "write_file")
"""What the corpus's SDK offers: ``read_file(path)``, ``list_files(directory?)``,
``write_file(path, content)``, ``search_web(query, limit?)``, ``get_weather(city)``,
``get_user(user_id)``, ``list_orders(user_id?)``, ``run_sql(query)`` (``select … from
users|orders [where k = v]``), ``stock_prices(symbol)``, ``bash(command)``,
``send_email(to, subject, body)``, ``translate(text, target)``."""


def bindings() -> dict[str, Any]:
    """One run's bindings (files written in a run are seen by its later reads only)."""
    written: dict[str, str] = {}

    def bind(name: str) -> Any:
        async def call(args: Any) -> str:
            await asyncio.sleep(0)
            return await _answer(name, dict(args or {}), written)

        return call

    return {name: bind(name) for name in TOOL_NAMES}


def programs() -> list[tuple[str, str]]:
    """``(name, source)`` of every corpus program, by file name."""
    return [(path.stem, path.read_text()) for path in sorted(PROGRAMS.glob("*.py"))]


def oracle(source: str) -> tuple[list[str], str | None]:
    """What plain CPython prints and returns for ``source`` (lines, rendered value)."""
    from dsh_actors.codemode._child import compile_program, make_tools, render_text

    calls = bindings()

    async def call(name: str, text: str) -> str:  # the sandbox's bindings send their arguments as JSON
        return await calls[name](json.loads(text))

    printed = io.StringIO()
    namespace: dict[str, Any] = {"__name__": "__sandbox__", "print": _printer(printed)}
    exec(compile_program(source), namespace)
    value = asyncio.run(namespace["__dsh_program__"](make_tools(sorted(calls), call)))
    text = printed.getvalue()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines, None if value is None else render_text(value)


def _printer(out: io.StringIO) -> Any:
    import builtins

    def printer(*args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("file", out)
        if kwargs["file"] is None:
            kwargs["file"] = out
        builtins.print(*args, **kwargs)

    return printer
