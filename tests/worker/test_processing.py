"""The worker: version order, handlers, statuses, retries and replay — on SQLite and on PostgreSQL + Redis."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from flask import Flask

from tests import sample_handlers, state_handlers
from tests.conftest import (
    admin_headers,
    adyen_body,
    adyen_item,
    base_config,
    drain,
    make_app,
    rows,
    stripe_event,
    stripe_headers,
)

ORDERS = list(itertools.permutations(range(3)))


def deliver_stripe(app: Flask, body: bytes) -> None:
    response = app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body))
    assert response.status_code == 200, response.data


def deliver_adyen(app: Flask, body: bytes) -> None:
    response = app.test_client().post("/webhooks/adyen", data=body)
    assert response.data == b"[accepted]"


def obj(app: Flask, path: str) -> dict:  # type: ignore[type-arg]
    response = app.test_client().get(f"/admin/api/objects/{path}", headers=admin_headers())
    assert response.status_code == 200, response.data
    return response.get_json()  # type: ignore[no-any-return]


@pytest.mark.parametrize("order", ORDERS)
def test_stripe_versions_in_any_order_leave_the_newest(any_app: Flask, order: tuple[int, ...]) -> None:
    versions = [
        stripe_event(
            f"evt_{i}",
            "payment_intent.updated",
            1700000000 + 60 * i,
            {"id": "pi_ord", "object": "payment_intent", "amount": 100 * (i + 1)},
        )
        for i in range(3)
    ]
    for i in order:
        deliver_stripe(any_app, versions[i])
        drain(any_app)  # processed in delivery order: the worst case for a naive receiver
    state = obj(any_app, "stripe/payment_intent/pi_ord")
    assert (state["last_event_id"], state["state"]["amount"]) == ("evt_2", 300)
    statuses = rows(any_app, "SELECT status FROM events")
    assert sorted(s for (s,) in statuses) == ["processed"] * 3


def test_stripe_same_second_ties_rank_terminal_over_update(any_app: Flask) -> None:
    succeeded = stripe_event(
        "evt_s",
        "payment_intent.succeeded",
        1700000000,
        {"id": "pi_tie", "object": "payment_intent", "status": "succeeded"},
    )
    updated = stripe_event(
        "evt_u",
        "payment_intent.updated",
        1700000000,
        {"id": "pi_tie", "object": "payment_intent", "status": "processing"},
    )
    for body in (succeeded, updated):
        deliver_stripe(any_app, body)
        drain(any_app)
    assert obj(any_app, "stripe/payment_intent/pi_tie")["state"]["status"] == "succeeded"


ADYEN_VERSIONS = [
    dict(psp="PAY1", code="AUTHORISATION", event_date="2024-01-01T10:00:00+01:00"),
    dict(psp="CAP1", code="CAPTURE", original="PAY1", event_date="2024-01-01T10:05:00+01:00"),
    dict(psp="REF1", code="REFUND", original="PAY1", event_date="2024-01-01T09:00:00+01:00"),  # skewed clock
]


@pytest.mark.parametrize("order", ORDERS)
def test_adyen_late_authorisation_never_undoes_capture_or_refund(any_app: Flask, order: tuple[int, ...]) -> None:
    for i in order:
        deliver_adyen(any_app, adyen_body(adyen_item(**ADYEN_VERSIONS[i])))  # type: ignore[arg-type]
        drain(any_app)
    state = obj(any_app, "adyen/payment/PAY1")
    assert (state["state"]["eventCode"], state["last_event_id"]) == ("REFUND", "REF1:REFUND:true")


def test_authorisation_after_capture(any_app: Flask) -> None:
    deliver_adyen(any_app, adyen_body(adyen_item(**ADYEN_VERSIONS[1])))  # type: ignore[arg-type]
    drain(any_app)
    deliver_adyen(any_app, adyen_body(adyen_item(**ADYEN_VERSIONS[0])))  # type: ignore[arg-type]
    drain(any_app)
    assert obj(any_app, "adyen/payment/PAY1")["state"]["eventCode"] == "CAPTURE"
    detail = any_app.test_client().get("/admin/api/events/adyen/PAY1:AUTHORISATION:true", headers=admin_headers())
    body = detail.get_json()
    assert (body["status"], body["object_type"], body["object_id"]) == ("processed", "payment", "PAY1")


def test_handlers_get_event_state_and_stable_key(any_app: Flask) -> None:
    body = stripe_event("evt_h")
    deliver_stripe(any_app, body)
    deliver_stripe(any_app, body)  # a duplicate: no second job, no second call
    drain(any_app)
    got = rows(any_app, "SELECT endpoint, event_id, idempotency_key FROM test_handler_calls")
    assert len(got) == 1 and got[0][:2] == ("stripe", "evt_h") and got[0][2].startswith("whk_")


def test_event_without_object_or_handler_is_ignored(sqlite_url: str) -> None:
    from tests.conftest import base_config, make_app

    app = make_app(base_config(sqlite_url, WEBHOOKS_HANDLERS=""))  # sample handlers imported, not enabled
    body = json.dumps(
        {
            "id": "evt_nobj",
            "object": "event",
            "created": 1700000000,
            "type": "balance.available",
            "data": {"object": {"available": []}},
        }
    ).encode()
    deliver_stripe(app, body)
    drain(app)
    assert rows(app, "SELECT status FROM events") == [("ignored",)]


def test_failing_handler_ends_failed_then_replay_runs_once_more_without_duplicate_effects(any_app: Flask) -> None:
    sample_handlers.FAIL_TYPES.add("charge.refunded")
    body = stripe_event("evt_fail", "charge.refunded", obj={"id": "ch_1", "object": "charge", "refunded": True})
    deliver_stripe(any_app, body)
    drain(any_app)
    client = any_app.test_client()
    event = client.get("/admin/api/events/stripe/evt_fail", headers=admin_headers()).get_json()
    assert (event["status"], event["attempts"]) == ("failed", 5)  # WEBHOOKS_MAX_ATTEMPTS default
    assert event["last_error"] == "RuntimeError: downstream timeout while refunding"
    assert "Traceback" in event["last_traceback"]
    assert rows(any_app, "SELECT 1 FROM test_handler_calls") == []  # failed attempts left no trace
    assert len(set(sample_handlers.DOWNSTREAM_CALLS)) == 1  # every retry used one idempotency key

    sample_handlers.FAIL_TYPES.clear()  # the fix
    response = client.post(
        "/admin/api/events/stripe/evt_fail/replay", json={"reason": "fixed"}, headers=admin_headers()
    )
    assert response.status_code == 202
    drain(any_app)
    event = client.get("/admin/api/events/stripe/evt_fail", headers=admin_headers()).get_json()
    assert (event["status"], event["attempts"], event["last_error"]) == ("processed", 6, None)
    assert len(sample_handlers.DOWNSTREAM_CALLS) == 6
    assert len(sample_handlers.DOWNSTREAM_EFFECTS) == 1  # the downstream acted once
    assert len(rows(any_app, "SELECT 1 FROM test_handler_calls")) == 1


def test_processed_event_is_not_processed_again_by_a_stray_job(any_app: Flask) -> None:
    from webhooks.jobs.process import process_event

    deliver_stripe(any_app, stripe_event("evt_once"))
    drain(any_app)
    assert process_event("stripe", "evt_once") == "skipped"
    assert len(rows(any_app, "SELECT 1 FROM test_handler_calls")) == 1


def test_retries_with_backoff_are_run_by_the_scheduler(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Backoff intervals put the job in RQ's scheduled registry; without a running scheduler it
    would wait there forever. The embedded worker's ticker promotes it.

    The scheduler's clock runs an hour ahead (RQ's ``current_timestamp``, which its scheduler reads
    for what is due): each retry is due at the ticker's next tick, so the test waits for ticks,
    not for 3–6 s of backoff."""
    import rq.scheduler

    from tests.conftest import base_config, make_app, wait_until

    real = rq.scheduler.current_timestamp
    monkeypatch.setattr(rq.scheduler, "current_timestamp", lambda: real() + 3600)
    app = make_app(
        base_config(
            sqlite_url, WEBHOOKS_EMBEDDED_WORKER="true", WEBHOOKS_RETRY_BASE_SECONDS="2", WEBHOOKS_MAX_ATTEMPTS="3"
        )
    )
    sample_handlers.FAIL_TYPES.add("charge.refunded")
    body = stripe_event("evt_backoff", "charge.refunded", obj={"id": "ch_2", "object": "charge"})
    deliver_stripe(app, body)
    client = app.test_client()

    def failed() -> dict | None:  # type: ignore[type-arg]
        event = client.get("/admin/api/events/stripe/evt_backoff", headers=admin_headers()).get_json()
        return event if event["status"] == "failed" else None

    event = wait_until(failed, timeout=90)  # two ticks of the ticker, on a loaded machine
    assert event["attempts"] == 3
    assert len(sample_handlers.DOWNSTREAM_CALLS) == 3


def test_only_the_claim_commits_without_waiting_for_the_disk(
    pg_url: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL: the claim is bookkeeping (its commit skips the WAL flush), the processing
    transaction that marks the event processed waits for the disk as every other commit does."""
    from tests.conftest import base_config, make_app
    from webhooks.store import pgwire

    app = make_app(base_config(pg_url, REDIS_URL=redis_url))
    deliver_stripe(app, stripe_event("evt_flush"))
    settings: list[str] = []
    send, show = pgwire.Wire.send, "SHOW synchronous_commit"

    def spy(self: pgwire.Wire, *texts: str, **params: Any) -> dict[str, Any]:
        """Each message that commits reads the setting its COMMIT runs under, just before it."""
        if pgwire.COMMIT not in texts:
            return send(self, *texts, **params)
        at = texts.index(pgwire.COMMIT)
        got = send(self, *texts[:at], show, *texts[at:], **params)
        settings.append(got.pop(show)[0][0])
        return got

    monkeypatch.setattr(pgwire.Wire, "send", spy)
    drain(app)
    assert settings == ["off", "on"]  # the claim, then the processing transaction
    assert rows(app, "SELECT status, attempts FROM events WHERE event_id = 'evt_flush'") == [("processed", 1)]


def test_a_handler_sees_the_endpoint_name_and_the_provider_kind(sqlite_url: str) -> None:
    """``event.endpoint`` is the endpoint's name, ``event.kind`` its provider kind, and
    ``event.provider`` (the attribute's former name) still the endpoint's name."""
    config = base_config(sqlite_url, WEBHOOKS_HANDLERS="tests.state_handlers")
    config["ENDPOINTS"]["stripe_connect"] = dict(config["ENDPOINTS"]["stripe"])
    state_handlers.reset()
    app = make_app(config)
    body = stripe_event("evt_h1")
    assert (
        app.test_client().post("/webhooks/stripe_connect", data=body, headers=stripe_headers(body)).status_code == 200
    )
    drain(app)
    (call,) = state_handlers.CALLS
    assert (call["endpoint"], call["provider"], call["kind"]) == ("stripe_connect", "stripe_connect", "stripe")
