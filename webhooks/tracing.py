"""OpenTelemetry traces from a provider's request to each forward, or nothing at all.

Off unless ``Settings.tracing`` (``switched_on``, read by ``webhooks.configuration.settings``: the
standard ``OTEL_*`` variables) or a
test's ``setup(exporter=...)`` turned it on; off, ``span`` and ``linked`` hand back one shared no-op
after a check of the module flag ``ENABLED``, and the OpenTelemetry packages (the ``otel`` extra) are
never imported. ``setup`` runs once per process (each process builds its runtime: web, worker and
``webhooks serve``'s children). A trace crosses the queue as a W3C ``traceparent`` stored on the
event's row and on each delivery's row (``traceparent()`` reads it, ``linked`` continues from it).
Attributes are names and ids only (``webhooks.<name>``): never a body, a header's value or a secret.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from typing import Any

ENABLED = False  # the one check on the request path when off
PREFIX = "webhooks."
_tracer: Any = None
_provider: Any = None
_lock = threading.Lock()
_configured = False


class _Quiet:
    """What ``span`` yields when tracing is off: accepts attributes, keeps nothing."""

    def set(self, name: str, value: Any) -> None:
        pass


class _Span:
    """What ``span`` yields when tracing is on: ``set`` adds one attribute (``webhooks.<name>``)."""

    def __init__(self, span: Any) -> None:
        self.span = span

    def set(self, name: str, value: Any) -> None:
        if value is not None:
            self.span.set_attribute(PREFIX + name, value)


QUIET = _Quiet()
_OFF = contextlib.nullcontext(QUIET)  # reusable: nullcontext keeps no state


def setup(enabled: bool = False, exporter: Any = None) -> None:
    """Turn tracing on for this process, once: with ``exporter`` (a test's ``InMemorySpanExporter``,
    spans exported as they end), else OTLP over HTTP as the ``OTEL_*`` variables say (batched)."""
    global ENABLED, _tracer, _provider, _configured
    if not (enabled or exporter is not None):
        return
    with _lock:
        if _configured:
            return
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        provider = TracerProvider(resource=Resource.create({"service.name": "webhooks"}))
        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
            trace.set_tracer_provider(provider)  # a handler's own spans join the job's trace
        else:
            provider.add_span_processor(SimpleSpanProcessor(exporter))
        _tracer, _provider = provider.get_tracer("webhooks"), provider
        _configured = ENABLED = True


def shutdown() -> None:
    """Flush and turn tracing off (the end of a test that turned it on)."""
    global ENABLED, _tracer, _provider, _configured
    with _lock:
        if _provider is not None:
            _provider.shutdown()
        _tracer, _provider, _configured, ENABLED = None, None, False, False


Traced = _Quiet | _Span


def span(name: str, start: int | None = None, **attributes: Any) -> contextlib.AbstractContextManager[Traced]:
    """A span named ``name``, child of the current one, with ``attributes`` (None values left out);
    ``start``: when it began (``time.time_ns()``), if before now."""
    if not ENABLED:
        return _OFF
    return _started(name, start, attributes)


def record(name: str, start: int, **attributes: Any) -> None:
    """A span named ``name`` that began at ``start`` (``time.time_ns()``) and ends now."""
    if ENABLED:
        _tracer.start_span(name, start_time=start, attributes=_kept(attributes)).end()


def _kept(attributes: dict[str, Any]) -> dict[str, Any]:
    return {PREFIX + k: v for k, v in attributes.items() if v is not None}


@contextlib.contextmanager
def _started(name: str, start: int | None, attributes: dict[str, Any]) -> Iterator[Traced]:
    kept = _kept(attributes)
    # No exception event: its message could quote what a sender sent; the outcome attribute says why.
    with _tracer.start_as_current_span(
        name, attributes=kept, start_time=start, record_exception=False, set_status_on_exception=False
    ) as current:
        try:
            yield _Span(current)
        except BaseException as exc:  # the refusal's reason (``VerificationError.reason``) or the error's class
            reason = getattr(exc, "reason", None)
            current.set_attribute(PREFIX + "outcome", str(getattr(reason, "value", reason) or exc.__class__.__name__))
            from opentelemetry.trace import StatusCode

            current.set_status(StatusCode.ERROR)  # no description: an error's text may quote a sender
            raise


def annotate(**attributes: Any) -> None:
    """Add ``attributes`` to the current span (None values left out)."""
    if not ENABLED:
        return
    from opentelemetry import trace

    current = trace.get_current_span()
    for name, value in attributes.items():
        if value is not None:
            current.set_attribute(PREFIX + name, value)


def traceparent() -> str | None:
    """The current span's W3C ``traceparent`` header value; None when off or outside a span."""
    if not ENABLED:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")


def linked(value: str | None) -> contextlib.AbstractContextManager[Any]:
    """Continue the trace of a stored ``traceparent`` inside the block (nothing when off or None)."""
    if not ENABLED or not value:
        return _OFF
    return _attached(value)


@contextlib.contextmanager
def _attached(value: str) -> Iterator[None]:
    from opentelemetry import context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    token = context.attach(TraceContextTextMapPropagator().extract({"traceparent": value}))
    try:
        yield
    finally:
        context.detach(token)


def trace_id(value: str | None) -> str | None:
    """The trace id (32 hex digits) of a stored ``traceparent`` (``00-<trace>-<span>-<flags>``)."""
    parts = (value or "").split("-")
    return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else None


def switched_on(env: Mapping[str, Any]) -> bool:
    """OpenTelemetry's switch, by its standard variables: on when ``OTEL_EXPORTER_OTLP_ENDPOINT``
    (or its traces one) is set or ``OTEL_TRACES_EXPORTER`` names an exporter, unless
    ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``."""
    exporter = (env.get("OTEL_TRACES_EXPORTER") or "").strip().lower()
    if (env.get("OTEL_SDK_DISABLED") or "").strip().lower() == "true" or exporter == "none":
        return False
    return bool(exporter or env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
