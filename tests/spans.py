"""Finished spans of this process, collected while a test asks for them.

The tracer provider is global and set once per process, so it is installed once (with a
processor that forwards to whoever is collecting) and stays; spans end up nowhere while
no test collects."""

import contextlib

_collectors = []
_installed = []


def _install():
    if _installed:
        return
    from opentelemetry import trace
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

    class Forward(SpanProcessor):
        def on_end(self, span):
            for spans in _collectors:
                spans.append(span)

    provider = TracerProvider()
    provider.add_span_processor(Forward())
    trace.set_tracer_provider(provider)
    _installed.append(provider)


@contextlib.contextmanager
def collected():
    """``with collected() as spans:`` — the spans that end inside, in the order they ended."""
    _install()
    spans = []
    _collectors.append(spans)
    try:
        yield spans
    finally:
        _collectors.remove(spans)
