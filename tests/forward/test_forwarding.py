"""Forwarding end to end on both databases: a verified event reaches a local service once per
destination, signed so that the ``standardwebhooks`` package accepts it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask

from tests.conftest import base_config, drain, make_app, rows, runtime, stripe_event, stripe_headers
from tests.support import destination
from webhooks.forward.dispatcher import Forwarder
from webhooks.forward.dispatcher import drain as drain_forwarder
from webhooks.forward.signing import message_id


@pytest.fixture
def service() -> Iterator[destination.Destination]:
    with destination.running() as dest:
        yield dest


def forwarding_app(request: pytest.FixtureRequest, db: str, dests: dict[str, Any], **endpoint: Any) -> Flask:
    url = request.getfixturevalue("sqlite_url" if db == "sqlite" else "pg_url")
    extra: dict[str, Any] = {} if db == "sqlite" else {"REDIS_URL": request.getfixturevalue("redis_url")}
    config = base_config(url, DESTINATIONS=dests, **extra)
    config["ENDPOINTS"]["stripe"].update(endpoint)
    return make_app(config)


def forward(app: Flask) -> None:
    """Run the queued jobs, then send what they created, in this thread."""
    drain(app)
    rt = runtime(app)
    forwarder = Forwarder(rt.sessions, rt.settings.destinations)
    try:
        drain_forwarder(forwarder)
    finally:
        forwarder.stop()


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_an_event_is_forwarded_signed_with_its_headers(
    request: pytest.FixtureRequest, db: str, service: destination.Destination
) -> None:
    app = forwarding_app(request, db, {"orders": destination.config(service)}, forward=["orders"])
    body = stripe_event("evt_fwd_1", obj={"id": "pi_9", "object": "payment_intent", "status": "succeeded"})
    assert app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200
    forward(app)
    [seen] = service.seen
    assert seen.verified and seen.body == body
    assert seen.headers["webhook-id"] == message_id("stripe", "evt_fwd_1", "orders")
    assert seen.headers["idempotency-key"] == seen.headers["webhook-id"]
    assert seen.headers["content-type"] == "application/json"
    assert seen.headers["webhooks-endpoint"] == "stripe"
    assert seen.headers["webhooks-event-id"] == "evt_fwd_1"
    assert seen.headers["webhooks-event-type"] == "payment_intent.succeeded"
    assert seen.headers["webhooks-object"] == "payment_intent/pi_9"
    assert seen.headers["webhooks-object-version"].isdigit()
    [row] = rows(app, "SELECT status, attempts, last_status_code FROM deliveries")
    assert tuple(row) == ("delivered", 1, 200)


def test_filtered_event_types_create_no_delivery(
    request: pytest.FixtureRequest, service: destination.Destination
) -> None:
    dests = {"orders": destination.config(service, events=["charge.*"])}
    app = forwarding_app(request, "sqlite", dests, forward=["orders"])
    for event_id, type_ in (("evt_a", "payment_intent.succeeded"), ("evt_b", "charge.refunded")):
        body = stripe_event(event_id, type_)
        app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body))
    forward(app)
    assert [s.headers["webhooks-event-id"] for s in service.verified()] == ["evt_b"]
    assert [tuple(r) for r in rows(app, "SELECT event_id FROM deliveries")] == [("evt_b",)]


def test_a_500_is_retried_with_the_same_id(request: pytest.FixtureRequest, service: destination.Destination) -> None:
    service.answer = lambda n, seen: (500, {}, b"boom") if n == 1 else (200, {}, b"ok")
    dests = {"orders": destination.config(service, retry_schedule=[0, 0])}
    app = forwarding_app(request, "sqlite", dests, forward=["orders"])
    body = stripe_event("evt_retry")
    app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body))
    forward(app)
    first, second = service.seen
    assert first.id == second.id and first.verified and second.verified
    assert first.headers["idempotency-key"] == second.headers["idempotency-key"]
    attempts = rows(app, "SELECT outcome, status_code, response FROM delivery_attempts ORDER BY id")
    assert [tuple(a) for a in attempts] == [("error", 500, "boom"), ("delivered", 200, "ok")]
    assert json.loads(json.dumps([tuple(r) for r in rows(app, "SELECT status, attempts FROM deliveries")])) == [
        ["delivered", 2]
    ]


def test_purge_keeps_an_event_still_being_forwarded(
    request: pytest.FixtureRequest, service: destination.Destination
) -> None:
    from datetime import UTC, datetime, timedelta

    from webhooks.store.purge import Plan, purge

    app = forwarding_app(request, "sqlite", {"orders": destination.config(service)}, forward=["orders"])
    for event_id in ("evt_sent", "evt_pending"):
        body = stripe_event(event_id)
        app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body))
    drain(app)
    rt = runtime(app)
    with rt.engine.begin() as conn:  # only evt_sent is sent: evt_pending's delivery waits an hour
        hour = datetime.now(UTC) + timedelta(hours=1)
        conn.execute(sa.text("UPDATE deliveries SET next_attempt_at = :t WHERE event_id = 'evt_pending'"), {"t": hour})
    forward(app)
    with rt.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE events SET received_at = '2000-01-01 00:00:00'")
    later = datetime.now(UTC) + timedelta(days=1)
    assert (
        purge(rt.sessions, Plan(timedelta(days=30), timedelta(days=60)), kinds={"stripe"}, force=True, now=later) == 1
    )
    assert [r[0] for r in rows(app, "SELECT event_id FROM events")] == ["evt_pending"]
    assert [r[0] for r in rows(app, "SELECT event_id FROM deliveries")] == ["evt_pending"]
    assert [r[0] for r in rows(app, "SELECT event_id FROM delivery_attempts")] == []


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_an_ordered_destination_gets_each_object_in_version_order_and_never_an_older_one(
    request: pytest.FixtureRequest, db: str, service: destination.Destination
) -> None:
    app = forwarding_app(request, db, {"orders": destination.config(service, ordered=True)}, forward=["orders"])
    # Posted out of order: pi_1 at 30, 10, 20 and pi_2 at 20, 10.
    for event_id, created, pi in (("e1", 30, "pi_1"), ("e2", 10, "pi_1"), ("e3", 20, "pi_2"), ("e4", 20, "pi_1")):
        body = stripe_event(event_id, created=1700000000 + created, obj={"id": pi, "object": "payment_intent"})
        app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body))
    body = stripe_event("e5", created=1700000010, obj={"id": "pi_2", "object": "payment_intent"})
    app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body))
    forward(app)
    sent = service.verified()
    assert sorted(s.headers["webhooks-event-id"] for s in sent) == ["e1", "e2", "e3", "e4", "e5"]
    for pi in ("pi_1", "pi_2"):
        versions = [s.version for s in sent if s.headers["webhooks-object"] == f"payment_intent/{pi}"]
        assert versions == sorted(versions)
    newest = {
        pi: max(s.version or 0 for s in sent if s.headers["webhooks-object"].endswith(pi)) for pi in ("pi_1", "pi_2")
    }
    assert {r[0]: r[1] for r in rows(app, "SELECT object_id, version FROM forwarded_objects")} == newest
    # An older version of pi_1 arriving later is not sent: superseded, with its attempt row.
    body = stripe_event("e6", created=1700000005, obj={"id": "pi_1", "object": "payment_intent"})
    app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body))
    forward(app)
    assert len(service.verified()) == 5
    [row] = rows(
        app,
        "SELECT d.status, a.outcome FROM deliveries d JOIN delivery_attempts a"
        " ON a.event_id = d.event_id WHERE d.event_id = 'e6'",
    )
    assert tuple(row) == ("superseded", "superseded")
