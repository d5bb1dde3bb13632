"""Restrictions: an agent scope's mask over the global tools (``allow`` keeps only, ``deny``
removes), validated against the global names when it is made."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from .errors import RestrictionError

__all__ = ["ToolRestriction", "compile_restriction", "unscoped_restriction"]


def unscoped_restriction() -> RestrictionError:
    """The refusal of ``restrict()`` on a registry (restrictions belong to an agent scope)."""
    return RestrictionError(
        "tools.restrict() requires a scoped context (registry.scope(agent_id)): a restriction "
        "masks one agent's view of the global tools")


@dataclass(frozen=True, slots=True)
class ToolRestriction:
    """A compiled mask over the global layer: ``allow`` keeps only, ``deny`` removes."""

    allow: frozenset[str] | None = None
    deny: frozenset[str] | None = None

    def admits(self, name: str) -> bool:
        return (self.allow is None or name in self.allow) and (self.deny is None or name not in self.deny)


def _names(value: object, key: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise RestrictionError(f"tools.restrict() {key} must be a list of tool names")
    names = list(value)
    if not all(isinstance(n, str) for n in names):
        raise RestrictionError(f"tools.restrict() {key} must contain only str tool names")
    return names


def compile_restriction(spec: Mapping[str, Any] | None, known_globals: Iterable[str],
                        reserved: Iterable[str] = ()) -> ToolRestriction:
    """Validate a ``{allow?, deny?}`` filter against the current global names and compile it."""
    spec = spec or {}
    extra = sorted(str(k) for k in spec if k not in ("allow", "deny"))
    if extra:
        raise RestrictionError(f"tools.restrict() got unknown key(s) {extra}; use allow and/or deny")
    allow = _names(spec.get("allow"), "allow")
    deny = _names(spec.get("deny"), "deny")
    if allow is None and deny is None:
        raise RestrictionError(
            "tools.restrict({}) is a no-op: pass allow=[...] to keep only those tools "
            "and/or deny=[...] to hide them"
        )
    named = [*(allow or []), *(deny or [])]
    for name in named:
        if name in reserved:
            raise RestrictionError(
                f'tools.restrict() cannot name reserved Code Mode presentation transport "{name}"; '
                "restrict end-capability tools instead"
            )
    known = set(known_globals)
    unknown = [name for name in named if name not in known]
    if unknown:
        listing = ", ".join(sorted(known)) or "(none)"
        quoted = ", ".join(f'"{name}"' for name in unknown)
        noun = "tool" if len(unknown) == 1 else "tools"
        raise RestrictionError(
            f"tools.restrict() names unknown global {noun} {quoted}; known global tools: {listing}"
        )
    return ToolRestriction(
        allow=None if allow is None else frozenset(allow),
        deny=None if deny is None else frozenset(deny),
    )
