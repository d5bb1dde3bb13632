"""Your own tools in a job, named by import path: ``package.module:name``.

``name`` is a list (or tuple) of tool definitions — dicts, :class:`ToolDefinition`, or
``@tool`` functions — or a function returning one. A function taking one parameter gets
the job's places: each agent's environment (:class:`~dsh_actors.runtime.AgentEnvironments`;
``place_of(places).place(ctx)`` reads, writes and runs commands inside it, ``places.at(ctx)``
is the agent's workspace on the host), or under ``--environments host`` each agent's own
workspace (:class:`~dsh_actors.tools.AgentWorkspaces`). A runnable example is
:mod:`dsh_actors.examples.tools_plugin` (``--tools dsh_actors.examples.tools_plugin:tools``).

A module that is not an installed package (a file next to the episodes, a folder of the
job's working directory) travels to the executors with the definitions, by value: nothing
needs installing on the nodes. An installed package must be installed on every node (or
shipped with the job's ``runtime_env``).
"""

from __future__ import annotations

import importlib
import inspect
import sys
import sysconfig
from pathlib import Path
from typing import Any

from ray import cloudpickle

from ..core.errors import HarnessError

__all__ = ["PluginError", "load_tools"]


class PluginError(HarnessError):
    """A tool plugin could not be loaded: a bad import path, a module that does not import,
    or a name that is neither a list of definitions nor a function returning one."""

    code = "PLUGIN"


def _installed(module: Any) -> bool:
    where = getattr(module, "__file__", None)
    if where is None:
        return True  # built in, or a namespace package: nothing to send by value
    path = Path(where).resolve()
    roots = {sysconfig.get_paths()[key] for key in ("purelib", "platlib", "stdlib")}
    return any(Path(root).resolve() in path.parents for root in roots)


def load_tools(spec: str, workspaces: Any) -> list[Any]:
    """The definitions ``spec`` (``module:name``) names, for the job's places (``workspaces``)."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise PluginError(f"tool plugin {spec!r} is not module:name (e.g. mytools:tools)")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))  # as `python -m` would: the working directory's modules import
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the plugin's, said in one line
        raise PluginError(f"tool plugin {spec!r}: cannot import {module_name!r}: {type(exc).__name__}: {exc}") from exc
    try:
        found = getattr(module, attribute)
    except AttributeError:
        raise PluginError(f"tool plugin {spec!r}: {module_name!r} has no {attribute!r}") from None
    if callable(found) and not isinstance(found, (list, tuple)):
        try:
            takes = len(inspect.signature(found).parameters)
        except (TypeError, ValueError):
            takes = 0
        try:
            found = found(workspaces) if takes else found()
        except Exception as exc:  # noqa: BLE001 - the plugin's own failure, said in one line
            raise PluginError(f"tool plugin {spec!r} raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(found, (list, tuple)):
        raise PluginError(f"tool plugin {spec!r} gave {type(found).__name__}; give a list of tool definitions "
                          "or a function returning one")
    top = module_name.split(".")[0]
    if top != "dsh_actors" and not _installed(sys.modules[top]):  # (this package is on every node)
        cloudpickle.register_pickle_by_value(sys.modules[top])
    return list(found)
