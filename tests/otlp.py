"""A real OTLP/HTTP trace receiver on loopback, as a collector is to the processes of a run:
``POST /v1/traces`` with a protobuf ``ExportTraceServiceRequest``, answered 200 with an
empty ``ExportTraceServiceResponse``. What arrived is kept as plain spans."""

import contextlib
import http.server
import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """One span as it arrived."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    attributes: dict
    resource: dict
    """The attributes of the resource that sent it (``process.pid``, ``service.instance.id``…)."""


def _value(any_value):
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return None if kind is None else getattr(any_value, kind)


def _spans_of(body):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    for resource_spans in ExportTraceServiceRequest.FromString(body).resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield Span(span.name, span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex() or None,
                           {a.key: _value(a.value) for a in span.attributes}, resource)


class Receiver:
    """Where the receiver listens (:attr:`endpoint`) and what it got (:attr:`spans`, in the
    order they arrived)."""

    def __init__(self, endpoint, spans):
        self.endpoint = endpoint
        self.spans = spans

    def env(self):
        """The standard variables that send a process's spans here."""
        return {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint}


@contextlib.contextmanager
def receiving():
    """``with receiving() as receiver:`` — a receiver listening on a free loopback port."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    answer = ExportTraceServiceResponse().SerializeToString()
    spans, lock = [], threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            arrived = list(_spans_of(body))
            with lock:
                spans.extend(arrived)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):  # quiet
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Receiver(f"http://127.0.0.1:{server.server_address[1]}", spans)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
