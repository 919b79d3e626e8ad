"""Traces from the provider's request to the forward (``webhooks.tracing``), with the SDK's in-memory
exporter in this process: one Stripe event forwarded to a local HTTP service is one trace, the service
receives its forward span's ``traceparent``, and no attribute holds the body or a secret; forwarded to
an HTTP service and to RabbitMQ at once, it is still one trace, and each target gets its own forward
span's ``traceparent``. Off, the receive path calls no tracer at all."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.conftest import STRIPE_SECRET, admin_headers, drain, rows, stripe_event, stripe_headers
from tests.forward.conftest import forwarding_app, post, settle_all
from tests.forward.test_bus_rabbitmq import bound, messages
from tests.forward.test_bus_rabbitmq import table as rabbitmq_table
from tests.support import brokers, destination
from webhooks import tracing


@pytest.fixture
def service() -> Iterator[destination.Destination]:
    with destination.running() as dest:
        yield dest


@pytest.fixture
def exported() -> Iterator[InMemorySpanExporter]:
    """Tracing on in this process, every span kept in memory; off again afterwards."""
    exporter = InMemorySpanExporter()
    tracing.setup(exporter=exporter)
    try:
        yield exporter
    finally:
        tracing.shutdown()


def traceparent(span: ReadableSpan) -> str:
    assert span.context is not None
    return f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}-{span.context.trace_flags:02x}"


def test_one_event_forwarded_is_one_trace_from_the_request_to_the_forward(
    request: pytest.FixtureRequest, service: destination.Destination, exported: InMemorySpanExporter
) -> None:
    app = forwarding_app(request, "sqlite", {"orders": destination.config(service)}, ["orders"])
    body = stripe_event("evt_traced", obj={"id": "pi_t", "object": "payment_intent", "description": "body-marker-7f3a"})
    headers = stripe_headers(body)
    assert post_signed(app, body, headers) == 200
    drain(app)
    settle_all(app)

    spans = exported.get_finished_spans()
    by_name = {s.name: s for s in spans}
    assert {"receive", "verify", "store", "enqueue", "job", "claim", "fetch", "mark", "forward"} <= set(by_name)
    assert len({s.context.trace_id for s in spans if s.context is not None}) == 1  # one trace
    receive, job, forward = by_name["receive"], by_name["job"], by_name["forward"]
    assert receive.parent is None
    assert job.parent is not None and receive.context is not None and job.parent.span_id == receive.context.span_id
    assert forward.parent is not None and job.context is not None and forward.parent.span_id == job.context.span_id
    assert by_name["verify"].attributes == {
        "webhooks.endpoint": "stripe",
        "webhooks.kind": "stripe",
        "webhooks.outcome": "verified",
    }
    assert receive.attributes is not None and receive.attributes["webhooks.outcome"] == "stored"
    assert tuple(receive.attributes["webhooks.event_ids"]) == ("evt_traced",)  # type: ignore[arg-type]
    assert job.attributes is not None and job.attributes["webhooks.outcome"] == "processed"
    assert forward.attributes is not None and forward.attributes["webhooks.outcome"] == "delivered"

    # The trace crossed the queue through the rows; the service got the forward span's context.
    [(stored,)] = rows(app, "SELECT traceparent FROM events WHERE event_id = 'evt_traced'")
    assert stored == traceparent(receive)
    [(delivery,)] = rows(app, "SELECT traceparent FROM deliveries WHERE event_id = 'evt_traced'")
    assert delivery == traceparent(job)
    [seen] = service.seen
    assert seen.verified and seen.headers["traceparent"] == traceparent(forward)

    # The admin API names the trace on each attempt and each delivery attempt, and the event page too.
    trace_id = f"{receive.context.trace_id:032x}"
    shown = app.test_client().get("/admin/api/events/stripe/evt_traced", headers=admin_headers()).get_json()
    assert shown["trace_id"] == trace_id
    assert [a["trace_id"] for a in shown["attempt_log"]] == [trace_id]
    [orders] = shown["deliveries"]
    assert orders["trace_id"] == trace_id and [h["trace_id"] for h in orders["history"]] == [trace_id]
    page = app.test_client().get("/admin/events/stripe/evt_traced", headers=admin_headers())
    assert trace_id in page.get_data(as_text=True)

    # Names and ids only: neither the body, nor a piece of it, nor a secret or a signature.
    secrets = [STRIPE_SECRET, service.secret, headers["Stripe-Signature"], seen.headers["webhook-signature"]]
    for span in spans:
        values = [str(v) for v in (span.attributes or {}).values()]
        values += [str(v) for event in span.events for v in (event.attributes or {}).values()]
        for value in values:
            assert body.decode() not in value and '"pi_t"' not in value and "body-marker-7f3a" not in value
            assert not any(secret in value for secret in secrets), (span.name, value)


@pytest.mark.slow
def test_a_forward_to_http_and_to_rabbitmq_is_one_trace(
    request: pytest.FixtureRequest,
    service: destination.Destination,
    exported: InMemorySpanExporter,
    rabbitmq: brokers.Broker,
) -> None:
    exchange = f"traced-{uuid.uuid4().hex[:8]}"
    queue = bound(rabbitmq, exchange)
    dests = {"orders": destination.config(service), "bus": rabbitmq_table(rabbitmq, exchange)}
    app = forwarding_app(request, "postgres", dests, ["orders", "bus"])
    body = stripe_event("evt_traced_bus", obj={"id": "pi_b", "object": "payment_intent", "note": "bus-marker-19c"})
    assert post_signed(app, body, stripe_headers(body)) == 200
    drain(app)
    settle_all(app)

    spans = exported.get_finished_spans()
    assert len({s.context.trace_id for s in spans if s.context is not None}) == 1  # one trace
    job = next(s for s in spans if s.name == "job")
    forwards = {s.attributes["webhooks.destination"]: s for s in spans if s.name == "forward" and s.attributes}
    assert set(forwards) == {"orders", "bus"}
    assert all(
        f.parent is not None and job.context is not None and f.parent.span_id == job.context.span_id
        for f in forwards.values()
    )
    assert all(f.attributes is not None and f.attributes["webhooks.outcome"] == "delivered" for f in forwards.values())
    [seen] = service.seen
    assert seen.headers["traceparent"] == traceparent(forwards["orders"])
    [(headers, got, _)] = messages(rabbitmq, queue)  # verified with the SDK on the way
    assert got == body and headers["traceparent"] == traceparent(forwards["bus"])
    for span in spans:
        for value in [str(v) for v in (span.attributes or {}).values()]:
            assert "bus-marker-19c" not in value and destination.SECRET not in value and rabbitmq.url not in value


def post_signed(app: Any, body: bytes, headers: dict[str, str]) -> int:
    return int(app.test_client().post("/webhooks/stripe", data=body, headers=headers).status_code)


class Refused:
    """A tracer provider (or tracer) that fails the test at any use."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"tracing is off, yet the tracer's {name} was used")


def refused(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("tracing is off, yet OpenTelemetry was called")


def test_off_the_receive_path_makes_no_tracer_call(
    request: pytest.FixtureRequest, service: destination.Destination, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry import trace

    assert not tracing.ENABLED
    monkeypatch.setattr(trace, "get_tracer_provider", refused)
    monkeypatch.setattr(trace, "get_current_span", refused)
    monkeypatch.setattr(tracing, "_tracer", Refused())
    app = forwarding_app(request, "sqlite", {"orders": destination.config(service)}, ["orders"])
    assert post(app, stripe_event("evt_untraced")) == 200
    drain(app)
    settle_all(app)
    assert [tuple(r) for r in rows(app, "SELECT traceparent FROM events")] == [(None,)]
    assert [tuple(r) for r in rows(app, "SELECT traceparent FROM deliveries")] == [(None,)]
    [seen] = service.seen
    assert "traceparent" not in seen.headers


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, False),
    ],
)
def test_the_switch_is_the_standard_otel_variables(environ: dict[str, str], on: bool) -> None:
    assert tracing.switched_on(environ) is on
