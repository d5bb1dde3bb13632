"""System-prompt assembly: sections, tool providers, assembly listeners, and tool order.

:class:`SystemPrompt` assembles, for a context (``{"scope": agent_id, ...}``), the sections
(by ``order``; ties keep registration order; a scoped section shadows a global one of the
same name) and the tool schemas its providers contribute, ordered by ``tool_order`` (or
by name). Assembly listeners then run as a waterfall ``(assembly, context, call_next)``,
scope-filtered; what they return is the assembly. Every assembly is a fresh snapshot.

:meth:`SystemPrompt.add_registry` adds a tool registry's contribution, mode-aware:

=======  =================================  ===============================  ============
mode     schemas contributed                known names                      tools:sdk
=======  =================================  ===============================  ============
native   every visible tool                 every global and scoped name     none
code     ``run_code`` only                  ``run_code`` only                yes (150)
both     every visible tool + ``run_code``  all names + ``run_code``         yes (150)
=======  =================================  ===============================  ============

In the code modes ``run_code`` and ``tools:sdk`` are protected: listeners may add to the
assembly but not remove either (they are restored), and a scoped section cannot shadow
``tools:sdk``. A missing code runtime, or one whose language is not ``python``, makes
every assembly raise an actionable error. It works with the in-process registry and with
the Ray client alike (their calls are awaited when they return responses).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from .codemode.sdk import SDK_ORDER, SDK_SECTION
from .core.errors import DefinitionError, HarnessError
from .core.pipeline.chain import run_chain, settle
from .core.registry import RUN_CODE, InMemoryDisposer

__all__ = ["UNLISTED", "Assembly", "PromptAssemblyError", "Section", "SystemPrompt"]

UNLISTED = "<unlisted-tools>"


class PromptAssemblyError(HarnessError, ValueError):
    """An assembly cannot be built as configured (tool order, providers, runtime)."""

    code = "PROMPT_ASSEMBLY"


@dataclass(frozen=True, slots=True)
class Section:
    """A rendered section of the system prompt."""

    name: str
    order: float
    text: str


@dataclass(slots=True)
class Assembly:
    """One assembly: its sections (in order) and tool schemas (in tool order)."""

    sections: list[Section] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)

    def text(self) -> str:
        """The sections' texts joined by blank lines (empty ones skipped)."""
        return "\n\n".join(s.text for s in self.sections if s.text)

    def tool_names(self) -> list[str]:
        return [t["name"] for t in self.tools]


@dataclass(frozen=True, slots=True, eq=False)
class _SectionEntry:
    name: str
    order: float
    text: Any
    scope: str | None


@dataclass(frozen=True, slots=True, eq=False)
class _Entry:
    fn: Callable[..., Any]
    scope: str | None


def _plural(names: Sequence[str]) -> str:
    quoted = ", ".join(f'"{n}"' for n in names)
    return f"tool {quoted}" if len(names) == 1 else f"tools {quoted}"


def _check_tool_order(order: Sequence[str] | None) -> list[str] | None:
    if order is None:
        return None
    order = list(order)
    seen: set[str] = set()
    for name in order:  # duplicates first: the rest marker twice is a duplicate too
        if name in seen:
            raise PromptAssemblyError(f'tool_order lists "{name}" more than once')
        seen.add(name)
    if UNLISTED not in seen:
        raise PromptAssemblyError(f'tool_order must contain the "{UNLISTED}" rest entry exactly once')
    return order


class SystemPrompt:
    """Assembles the system prompt; see the module docs."""

    def __init__(self, *, tool_order: Sequence[str] | None = None) -> None:
        self._tool_order = _check_tool_order(tool_order)
        self._sections: list[_SectionEntry] = []
        self._providers: list[_Entry] = []
        self._listeners: list[_Entry] = []
        # Code Mode's pieces: put back from the pre-listener assembly if a listener drops them.
        self._protected_tools: list[str] = []
        self._protected_sections: list[str] = []

    # registration

    def section(self, name: str, order: float, text: str | Callable[[Mapping[str, Any]], Any], *,
                scope: str | None = None) -> InMemoryDisposer:
        """Add a section (``text`` may be a function of the assembly context)."""
        if isinstance(order, bool) or not isinstance(order, (int, float)) or not math.isfinite(order):
            raise TypeError(f'section "{name}" order must be a finite number')
        if scope is not None and name in self._protected_sections:
            raise DefinitionError(f'section "{SDK_SECTION}" is protected in Code Mode; a scope cannot shadow it')
        for entry in self._sections:
            if entry.name == name and entry.scope == scope:
                raise DefinitionError(
                    f'section "{name}" is already registered in this scope' if scope is not None else
                    f'section "{name}" is already registered (for a per-agent variant, pass scope=agent_id)')
        entry = _SectionEntry(name, order, text, scope)
        self._sections.append(entry)
        return InMemoryDisposer(lambda: self._sections.remove(entry) if entry in self._sections else None)

    def tools(self, provider: Callable[[Mapping[str, Any]], Any], *, scope: str | None = None) -> InMemoryDisposer:
        """Add a tool provider: ``provider(context) -> {"schemas": [...], "known_names"?: [...]}``."""
        entry = _Entry(provider, scope)
        self._providers.append(entry)
        return InMemoryDisposer(lambda: self._providers.remove(entry) if entry in self._providers else None)

    def on_assemble(self, listener: Callable[..., Any], *, scope: str | None = None) -> InMemoryDisposer:
        """Add an assembly listener ``(assembly, context, call_next) -> assembly``."""
        entry = _Entry(listener, scope)
        self._listeners.append(entry)
        return InMemoryDisposer(lambda: self._listeners.remove(entry) if entry in self._listeners else None)

    def add_registry(self, registry: Any) -> InMemoryDisposer:
        """Contribute ``registry``'s tools (mode-aware) and, in the code modes, ``tools:sdk``."""
        mode = registry.mode

        async def provider(context: Mapping[str, Any]) -> dict[str, Any]:
            # (In the code modes a missing runtime already fails the tools:sdk section.)
            scope = context.get("scope")
            schemas = list(await settle(registry.schemas(scope)))
            if mode == "code":
                return {"schemas": [s for s in schemas if s["name"] == RUN_CODE], "known_names": [RUN_CODE]}
            known = list(await settle(registry.known_names(scope)))
            if mode == "both":
                known.append(RUN_CODE)
            return {"schemas": schemas, "known_names": known}

        shadows = sorted(str(e.scope) for e in self._sections if e.name == SDK_SECTION and e.scope is not None)
        if mode != "native" and shadows:  # added before the registry: the protection must not depend on order
            raise DefinitionError(f'section "{SDK_SECTION}" is protected in Code Mode; a scope cannot shadow it '
                                  f"(scoped sections named so exist for: {', '.join(shadows)})")
        disposers = [self.tools(provider)]
        if mode != "native":
            async def sdk_text(context: Mapping[str, Any]) -> str:
                return str(await settle(registry.sdk(context.get("scope"))))

            disposers.append(self.section(SDK_SECTION, SDK_ORDER, sdk_text))
            self._protected_tools.append(RUN_CODE)
            self._protected_sections.append(SDK_SECTION)

            def unprotect() -> None:
                self._protected_tools.remove(RUN_CODE)
                self._protected_sections.remove(SDK_SECTION)

            disposers.append(InMemoryDisposer(unprotect))

        def dispose_all() -> None:
            for disposer in reversed(disposers):
                disposer()

        return InMemoryDisposer(dispose_all)

    # assembly

    async def assemble(self, context: Mapping[str, Any] | None = None) -> Assembly:
        """A fresh, deterministic assembly for ``context`` (``{"scope": agent_id, ...}``)."""
        context = {} if context is None else context
        scope = context.get("scope")
        sections = await self._render_sections(context, scope)
        schemas, known = await self._collect_tools(context, scope)
        built = Assembly(sections=sections, tools=self._order_tools(schemas, known))

        # Listeners may mutate the assembly in place: keep the protected pieces aside first.
        kept_tools = [copy.deepcopy(t) for t in built.tools if t["name"] in self._protected_tools]
        kept_sections = [s for s in built.sections if s.name in self._protected_sections]

        async def base() -> Assembly:
            return built

        listeners = tuple(e.fn for e in self._listeners if e.scope is None or e.scope == scope)
        assembly = await run_chain(listeners, (built, context), base) if listeners else built
        if not isinstance(assembly, Assembly):
            raise PromptAssemblyError("an assembly listener must return the Assembly")
        names = set(assembly.tool_names())
        assembly.tools.extend(t for t in kept_tools if t["name"] not in names)
        present = {s.name for s in assembly.sections}
        missing = [s for s in kept_sections if s.name not in present]
        if missing:
            assembly.sections.extend(missing)
            assembly.sections.sort(key=lambda s: s.order)
        return assembly

    async def _render_sections(self, context: Mapping[str, Any], scope: str | None) -> list[Section]:
        chosen: dict[str, _SectionEntry] = {}
        for entry in self._sections:  # globals first, in registration order
            if entry.scope is None:
                chosen[entry.name] = entry
        for entry in self._sections:  # a scoped section shadows by name, never a protected one
            if scope is not None and entry.scope == scope and entry.name not in self._protected_sections:
                chosen[entry.name] = entry
        rendered = []
        for entry in sorted(chosen.values(), key=lambda e: e.order):  # stable: ties keep order
            text = entry.text(context) if callable(entry.text) else entry.text
            rendered.append(Section(entry.name, entry.order, str(await settle(text))))
        return rendered

    async def _collect_tools(self, context: Mapping[str, Any], scope: str | None) -> tuple[list[dict[str, Any]], set[str]]:
        schemas: list[dict[str, Any]] = []
        known: set[str] = set()
        for entry in self._providers:
            if entry.scope is not None and entry.scope != scope:
                continue
            offered = await settle(entry.fn(context))
            names_here = []
            for schema in offered.get("schemas", []):
                if schema.get("name") == UNLISTED:
                    raise PromptAssemblyError(f'tool provider returned reserved tool name "{UNLISTED}"')
                schemas.append({"name": schema["name"], "description": schema.get("description", ""),
                                "parameters": copy.deepcopy(schema.get("parameters", {}))})
                names_here.append(schema["name"])
            known.update(offered.get("known_names", names_here))
        return schemas, known

    def _order_tools(self, schemas: list[dict[str, Any]], known: Iterable[str]) -> list[dict[str, Any]]:
        by_name = sorted(schemas, key=lambda s: s["name"])
        if self._tool_order is None:
            return by_name
        known = set(known)
        missing = [n for n in self._tool_order if n != UNLISTED and n not in known]
        if missing:
            listing = ", ".join(sorted(known)) or "(none)"
            raise PromptAssemblyError(f"tool_order lists unregistered {_plural(missing)}; known tools: {listing}")
        listed = [n for n in self._tool_order if n != UNLISTED]
        present = {s["name"]: s for s in by_name}
        out: list[dict[str, Any]] = []
        for name in self._tool_order:
            if name == UNLISTED:
                out.extend(s for s in by_name if s["name"] not in listed)
            elif name in present:
                out.append(present[name])
        return out
