"""Where a process's spans go: its tracer provider, set from its environment; the variables
a job hands its workers so that each sets its own the same way; and a flush before the
process is ended.

Every process of a run that makes spans (the driver, episode runners, executors, Code Mode
queues, body tasks) calls :func:`configure` once. It reads the standard variables, as the
OpenTelemetry specification defines them:

- ``DSH_TRACE_FILE``: each span a JSON line appended to that file as it ends (offline runs,
  tests);
- ``OTEL_TRACES_EXPORTER``: ``otlp`` is the OTLP exporter of the protocol that
  ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` or ``OTEL_EXPORTER_OTLP_PROTOCOL`` names:
  ``http/protobuf`` (the default, the specification's, and the exporter that
  ``dsh-actors[tracing]`` installs) or ``grpc`` (with ``opentelemetry-exporter-otlp-proto-grpc``).
  Any other name is an installed exporter's entry point (``console``, ``otlp_proto_http``…).
  The exporters read their own ``OTEL_EXPORTER_OTLP_*`` settings (endpoint, headers).

Exported spans are batched (``OTEL_BSP_*``: by default they leave up to 5 s after they
end), and a process ended by ``ray.kill`` runs no exit hook: whoever ends such a process
first has it :func:`flush` (``runtime/traces.py`` on Ray). Each process's resource names
it: ``process.pid`` and a ``service.instance.id`` of its own (``OTEL_RESOURCE_ATTRIBUTES``
wins over both).

Measured before this module existed: ``dsh-actors eval`` with ``OTEL_TRACES_EXPORTER=otlp``
delivered zero spans — ``otlp`` was looked up as a literal entry point (only the gRPC
meta-package has one), and every batch died with its actor.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from typing import Mapping

from opentelemetry import trace

from .telemetry import tracing

__all__ = ["FLUSH_S", "configure", "exporter_names", "flush", "tracing_variables"]

FLUSH_S = 5.0
"""How long a flush waits for its spans to be exported, at most (a collector that is down
must not hold a job's end longer than this)."""

_OTLP_BY_PROTOCOL = {"http/protobuf": "otlp_proto_http", "grpc": "otlp_proto_grpc"}
_CARRIED = ("OTEL_", "DSH_TRACE_")
log = logging.getLogger("dsh_actors.telemetry")


def tracing_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``environ`` that decide a process's tracing (``OTEL_*``,
    ``DSH_TRACE_*``): what a driver hands the workers of its job, and nothing else."""
    return {key: value for key, value in environ.items() if key.startswith(_CARRIED)}


def exporter_names(environ: Mapping[str, str]) -> list[str]:
    """The exporters' entry point names ``OTEL_TRACES_EXPORTER`` selects in ``environ``
    (``otlp`` resolved by its protocol; ``none`` selects nothing). ``ValueError`` for an
    OTLP protocol no exporter speaks."""
    names = []
    for name in (n.strip() for n in environ.get("OTEL_TRACES_EXPORTER", "").split(",")):
        if name == "otlp":
            protocol = (environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                        or "http/protobuf").strip()
            if protocol not in _OTLP_BY_PROTOCOL:
                raise ValueError(f"the OTLP protocol is {protocol!r}; an OTLP span exporter speaks "
                                 f"{' or '.join(_OTLP_BY_PROTOCOL)}")
            name = _OTLP_BY_PROTOCOL[protocol]
        if name and name != "none":
            names.append(name)
    return names


_configured: list[bool] = []
_flushing: threading.Thread | None = None  # the last flush's thread (one runs at a time)
_flush_lock = threading.Lock()


def configure() -> None:
    """Set this process's tracer provider from its environment, once (see the module's
    docs). Needs ``opentelemetry-sdk``; without it, or with neither variable set, nothing
    happens. A provider already set is kept. It never raises: a file it cannot open or an
    exporter that fails to load leaves tracing off in this process, with a warning in its log."""
    if _configured:
        return
    _configured.append(True)
    try:
        _configure()
    except Exception as exc:  # noqa: BLE001 - a tracing setup that fails must never stop the process's work
        log.warning("tracing is off in this process: %s", exc)


def _configure() -> None:
    trace.get_tracer_provider()  # resolves OTEL_PYTHON_TRACER_PROVIDER, if that is how it is set
    if tracing():
        return
    path = os.environ.get("DSH_TRACE_FILE")
    names = exporter_names(os.environ)
    if not path and not names:
        return
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    except ImportError:
        return
    ours = Resource({"process.pid": os.getpid(), "service.instance.id": uuid.uuid4().hex})
    provider = TracerProvider(resource=ours.merge(Resource.create()))
    if path:
        from ._span_file import JsonLinesSpanExporter

        provider.add_span_processor(SimpleSpanProcessor(JsonLinesSpanExporter(path)))
    if names:
        from importlib.metadata import entry_points

        for name in names:
            found = list(entry_points(group="opentelemetry_traces_exporter", name=name))
            if not found:
                known = sorted(e.name for e in entry_points(group="opentelemetry_traces_exporter"))
                raise ValueError(f"OTEL_TRACES_EXPORTER names {name!r}, which no installed package provides "
                                 f"(installed: {', '.join(known) or 'none'}; pip install 'dsh-actors[tracing]' "
                                 "brings otlp_proto_http)")
            for entry in found:
                provider.add_span_processor(BatchSpanProcessor(entry.load()()))
    trace.set_tracer_provider(provider)


def flush(timeout_s: float = FLUSH_S) -> bool:
    """Export the spans this process still holds, waiting ``timeout_s`` at most; whether
    the exporters were done by then. With no provider of the SDK's there is nothing to do
    (``True``). It never raises.

    The SDK's own ``force_flush`` ignores its timeout (1.45: it exports in the caller's
    thread; with the collector down it returned after 6.6 s of retries for a 1 s
    timeout), so it runs on a thread of its own that is waited for ``timeout_s``. While
    one such flush is still stuck, another returns ``False`` at once instead of waiting too."""
    global _flushing
    force_flush = getattr(trace.get_tracer_provider(), "force_flush", None)
    if force_flush is None:
        return True
    done: list[bool] = []

    def run() -> None:
        try:
            done.append(bool(force_flush(int(timeout_s * 1000))))
        except Exception as exc:  # noqa: BLE001 - a flush that fails must never stop the process's end
            log.warning("spans not flushed: %s", exc)
            done.append(False)

    with _flush_lock:
        if _flushing is not None and _flushing.is_alive():
            return False
        flushing = _flushing = threading.Thread(target=run, name="dsh-trace-flush", daemon=True)
        flushing.start()
    flushing.join(timeout_s)
    return bool(done and done[0])
