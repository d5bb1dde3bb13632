"""Connecting to Ray: the cluster named by ``RAY_ADDRESS`` (as ``ray job submit`` sets it),
else a local instance of our own.

A local instance is started on loopback only (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``
keeps every address on 127.0.0.1 in Ray 2.60; recheck on upgrades), without a dashboard
unless asked for. Without ``RAY_ADDRESS`` it never joins whatever cluster happens to be
recorded on the machine: "start on its own" means exactly that.

The processes of a local instance inherit the driver's environment, its tracing variables
included. A cluster started elsewhere has the environment of whoever started it (a job
joining it with ``OTEL_TRACES_EXPORTER`` set delivered no span: measured), so a driver that
joins one hands its tracing variables (``OTEL_*``, ``DSH_TRACE_*``: nothing else) to every
worker of its job through the job's runtime env, under any ``env_vars`` the caller gives.
Only then: a runtime env costs every worker of the job a fresh start (Ray's prestarted
workers have none; four actors took 2.5–5.6 s instead of 1.5–2.9 s). A job submitted with
``ray job submit`` is left as it is: it runs in the runtime env it was submitted with (Ray
refuses a driver's that names the same variables), so the variables go in
``--runtime-env-json`` there.
"""

from __future__ import annotations

import os
from typing import Any

import ray
from ray._private import ray_constants
from ray._private.runtime_env.constants import RAY_JOB_CONFIG_JSON_ENV_VAR

from ..core.trace_export import tracing_variables

__all__ = ["ensure_ray", "this_node"]


def this_node() -> str | None:
    """The id of the node this process runs on (``None`` when not connected to Ray: asking
    then would start a Ray instance)."""
    if not ray.is_initialized():
        return None
    try:
        return ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - no node to say
        return None


def ensure_ray(**init_options: Any) -> None:
    """Initialise Ray once: ``RAY_ADDRESS`` (or an ``address`` option) joins a cluster,
    whose workers of this job get this process's tracing variables; otherwise a new local
    instance starts on 127.0.0.1."""
    if ray.is_initialized():
        return
    options: dict[str, Any] = {"include_dashboard": False, "logging_level": "WARNING", "log_to_driver": True}
    options.update(init_options)
    carried = tracing_variables(os.environ)
    joining = options.get("address", os.environ.get("RAY_ADDRESS")) not in (None, "", "local")
    if joining and carried and RAY_JOB_CONFIG_JSON_ENV_VAR not in os.environ:
        given = dict(options.get("runtime_env") or {})
        options["runtime_env"] = {**given, "env_vars": {**carried, **(given.get("env_vars") or {})}}
    if "address" not in options and not os.environ.get("RAY_ADDRESS"):
        # Starting our own instance: loopback only. Ray reads the switch at import time,
        # so set both the environment (for the processes it starts) and its constant.
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        ray_constants.ENABLE_RAY_CLUSTER = False
        options.setdefault("_node_ip_address", "127.0.0.1")
        options["address"] = "local"
    ray.init(**options)
