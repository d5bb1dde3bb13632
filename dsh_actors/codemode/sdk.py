"""The ``tools:sdk`` section: fixed instructions and a Python stub of the scope's bindings.

:func:`render_sdk` is deterministic — tools sorted by name, byte-identical text for an
unchanged tool set (prefix-cache friendly). :func:`json_schema_to_python` is total:
anything outside the subset it understands becomes ``Any``; it never raises.
"""

from __future__ import annotations

import json
import keyword
import re
import unicodedata
from typing import Any, Iterable, Mapping

__all__ = ["SDK_INSTRUCTIONS", "SDK_SECTION", "SDK_ORDER", "json_schema_to_python", "render_sdk", "sdk_section_text"]

SDK_SECTION = "tools:sdk"
SDK_ORDER = 150

SDK_INSTRUCTIONS = """\
Code Mode: call `run_code` with the body of an async Python function. Top-level `await` and \
`return` are allowed. Call tools as `await tools.name(arg=value, ...)` (or \
`await tools["exotic-name"]({...})` for names that are not Python identifiers); each call \
returns the tool's text output as a `str`.
- Arguments must be JSON-serializable (dicts, lists, str, numbers, bools, None).
- A failed call raises an exception whose message is the tool's error text; catch it with \
`try`/`except` if you can recover.
- Calls run one at a time, in the order you make them, even under `asyncio.gather`.
- Only what you print or return comes back to you; the tools' raw results do not.
- Each run starts fresh: no variables, files or imports survive between runs.
The available tools:"""


def _is_identifier(name: object) -> bool:
    return isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name)


def json_schema_to_python(schema: Any, indent: int = 0) -> str:
    """A Python type expression for ``schema`` (``Any`` for anything it does not know)."""
    try:
        return _type(schema)
    except Exception:  # total: a hostile schema still renders
        return "Any"


def _type(schema: Any) -> str:
    if not isinstance(schema, Mapping):
        return "Any"
    kind = schema.get("type")
    if kind == "string":
        enum = schema.get("enum")
        if isinstance(enum, list) and enum and all(isinstance(m, str) for m in enum):
            return "Literal[" + ", ".join(_literal(m) for m in enum) + "]"
        return "str"
    if kind == "number":
        return "float"
    if kind == "integer":
        return "int"
    if kind == "boolean":
        return "bool"
    if kind == "null":
        return "None"
    if kind == "array":
        return f"list[{_type(schema.get('items'))}]"
    if kind == "object":
        properties = schema.get("properties")
        if not isinstance(properties, Mapping) or not properties:
            return "dict[str, Any]"
        required = {r for r in schema.get("required", []) if isinstance(r, str)} \
            if isinstance(schema.get("required"), list) else set()
        fields = []
        for name, prop in properties.items():
            inner = _type(prop)
            fields.append(f"{_literal(str(name))}: "
                          + (inner if name in required else f"NotRequired[{inner}]"))
        return "TypedDict({" + ", ".join(fields) + "})"
    return "Any"


def _literal(text: str) -> str:
    """``text`` as a Python string literal that any source encoding carries (a lone
    surrogate is written as its escape, as JSON writes it)."""
    return "".join(_visible(c) for c in json.dumps(text, ensure_ascii=False))


def _doc(text: Any) -> str:
    """One line of text (whitespace runs collapsed); ``""`` for a non-str."""
    if not isinstance(text, str):
        return ""
    return " ".join(text.split())


def _visible(char: str) -> str:
    """A character Python source can carry as is, or its escape (controls, surrogates)."""
    if unicodedata.category(char) in ("Cc", "Cs"):
        code = ord(char)
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    return char


def _comment(text: str) -> str:
    """``text`` as the rest of a ``#`` comment line (nothing in it can end the line)."""
    return "".join(_visible(c) for c in text)


def _in_docstring(text: str) -> str:
    """``text`` as it must be written inside a triple-quoted docstring so that nothing in
    it can end the docstring or form a bad escape: backslashes doubled, any run of
    quotes broken, a closing quote escaped, controls and surrogates escaped."""
    out = "".join(_visible(c) if c != "\\" else "\\\\" for c in text)
    out = re.sub('"{3,}', lambda m: '\\"' * len(m.group()), out)
    return re.sub('"+$', lambda m: '\\"' * len(m.group()), out)


def _signature(parameters: Any) -> tuple[str, list[str]]:
    """The parameter list and the ``Args:`` doc lines for a tool's parameters schema."""
    properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
    if not isinstance(properties, Mapping) or not properties:
        return "", []
    required = parameters.get("required") if isinstance(parameters.get("required"), list) else []
    docs = [f"    {name}: {_doc(prop.get('description'))}" for name, prop in properties.items()
            if isinstance(prop, Mapping) and _doc(prop.get("description"))]
    if not all(_is_identifier(name) for name in properties):
        return f"args: {json_schema_to_python(parameters)}, /", docs
    params = []
    for name, prop in properties.items():
        hint = json_schema_to_python(prop)
        params.append(f"{name}: {hint}" if name in required else f"{name}: {hint} = ...")
    return "*, " + ", ".join(params), docs


def render_sdk(schemas: Iterable[Mapping[str, Any]]) -> str:
    """The Python stub declaring one async binding per tool, sorted by name."""
    by_name = sorted((s for s in schemas if isinstance(s.get("name"), str)), key=lambda s: s["name"])
    lines = ["class tools:", '    """Your tools. Every call is awaited and returns the tool\'s text output."""']
    if not by_name:
        lines.append("    # (no tools are available to this program)")
    for schema in by_name:
        name = schema["name"]
        params, arg_docs = _signature(schema.get("parameters"))
        description = _doc(schema.get("description"))
        lines.append("")
        doc = [description] if description else []
        if not _is_identifier(name):
            # Not an identifier: no method can carry the name, so the stub states the call.
            lines.append(_comment(f"    # await tools[{json.dumps(name, ensure_ascii=False)}]({params}) -> str"))
            lines.extend(_comment(f"    #     {d}").rstrip() for d in doc + (["Args:"] + arg_docs if arg_docs else []))
            continue
        lines.append(f"    async def {name}({params}) -> str:")
        if arg_docs:
            doc += (["", "Args:"] if doc else ["Args:"]) + arg_docs
        doc = [_in_docstring(d) for d in doc]
        if doc:
            lines.append('        """' + doc[0] if len(doc) > 1 else '        """' + doc[0] + '"""')
            if len(doc) > 1:
                lines.extend(("        " + d).rstrip() for d in doc[1:])
                lines.append('        """')
        else:
            lines.append("        ...")
    return "\n".join(lines)


def sdk_section_text(schemas: Iterable[Mapping[str, Any]], dialect: str | None = None) -> str:
    """The whole ``tools:sdk`` section: instructions (with the language the sandbox runs,
    when known), a blank line, the fenced stub."""
    language = f"The language: {dialect}.\n" if dialect else ""
    return f"{language}{SDK_INSTRUCTIONS}\n\n```python\n{render_sdk(schemas)}\n```"
