"""The operator's side of forwarding: the destinations list (API and page), pause and resume, an
event's deliveries with every attempt, and replay to a destination (re-send and backfill), with a
real local destination."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import update

from tests import sample_handlers
from tests.conftest import (
    STRIPE_SECRET,
    admin_headers,
    base_config,
    drain,
    make_app,
    rows,
    runtime,
    stripe_event,
    stripe_headers,
)
from tests.forward.test_forwarding import forward
from tests.support import destination
from tests.support.console import csrf_token
from webhooks.forward import dispatcher
from webhooks.forward.signing import message_id
from webhooks.service.cli import main
from webhooks.tables.forwarding import DestinationState

H = admin_headers()


@pytest.fixture
def service() -> Iterator[destination.Destination]:
    with destination.running() as dest:
        yield dest


@pytest.fixture
def other() -> Iterator[destination.Destination]:
    with destination.running(destination.SECRET_2) as dest:
        yield dest


def forwarding(request: pytest.FixtureRequest, db: str, dests: dict[str, Any], forward_to: list[str]) -> Flask:
    url = request.getfixturevalue("sqlite_url" if db == "sqlite" else "pg_url")
    extra: dict[str, Any] = {} if db == "sqlite" else {"REDIS_URL": request.getfixturevalue("redis_url")}
    config = base_config(url, DESTINATIONS=dests, **extra)
    config["ENDPOINTS"]["stripe"]["forward"] = forward_to
    return make_app(config)


def post(app: Flask, event_id: str, type_: str = "payment_intent.succeeded") -> None:
    body = stripe_event(event_id, type_)
    assert app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200


def loaded(value: Any) -> Any:
    """A JSON column as read back: text on SQLite, decoded on PostgreSQL."""
    return json.loads(value) if isinstance(value, str) else value


def listed(client: FlaskClient) -> dict[str, dict[str, Any]]:
    answer = client.get("/admin/api/destinations", headers=H)
    assert answer.status_code == 200
    return {d["name"]: d for d in answer.get_json()["destinations"]}


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_the_list_shows_every_configured_destination_and_no_secret(
    request: pytest.FixtureRequest, db: str, service: destination.Destination, other: destination.Destination
) -> None:
    dests = {"orders": destination.config(service), "audit": destination.config(other)}
    app = forwarding(request, db, dests, ["orders"])
    client = app.test_client()
    post(app, "evt_1")
    drain(app)  # processed: its delivery is pending, nothing sent yet
    before = listed(client)
    assert before["orders"]["state"] == "active" and before["orders"]["pending"] == 1
    assert before["orders"]["oldest_pending_seconds"] >= 0 and before["orders"]["last_success_at"] is None
    forward(app)
    found = listed(client)
    assert list(found) == ["orders", "audit"]  # as configured, the never-sent one too
    assert found["orders"] | {"last_success_at": None} == {
        "name": "orders",
        "kind": "http",
        "target": service.url,
        "url": service.url,
        "state": "active",
        "pending": 0,
        "failed": 0,
        "oldest_pending_seconds": None,
        "last_success_at": None,
        "last_error": None,
        "ordered": False,
        "events": [],
        "filter": None,
        "throttled_until": None,
        "paused_reason": None,
        "source": "file",  # #32: where it is defined, its label and (the database's) secrets
        "label": None,
        "secrets": [],
    }
    assert found["orders"]["last_success_at"].endswith("Z")
    assert found["audit"]["state"] == "active" and found["audit"]["pending"] == found["audit"]["failed"] == 0
    assert found["audit"]["url"] == other.url
    text = client.get("/admin/api/destinations", headers=H).get_data(as_text=True)
    page = client.get("/admin/destinations", headers=H).get_data(as_text=True)
    for shown in (text, page):
        for secret in (destination.SECRET, destination.SECRET_2):
            assert secret not in shown and secret.removeprefix("whsec_") not in shown


def test_pause_stops_sending_and_resume_closes_the_circuit(
    request: pytest.FixtureRequest, service: destination.Destination
) -> None:
    service.answer = lambda n, seen: (500, {}, b"down") if n == 1 else (200, {}, b"ok")
    dests = {"orders": destination.config(service, circuit_failures=1, retry_schedule=[0, 0], probe_seconds=3600)}
    app = forwarding(request, "sqlite", dests, ["orders"])
    client = app.test_client()
    post(app, "evt_1")
    forward(app)  # one 500 opens the circuit; the probe is an hour away
    assert len(service.seen) == 1 and listed(client)["orders"]["state"] == "open"
    assert "HTTP 500" in listed(client)["orders"]["last_error"]

    paused = client.post("/admin/api/destinations/orders/pause", json={"reason": "INC-7 maintenance"}, headers=H)
    assert paused.status_code == 200 and paused.get_json()["state"] == "paused"
    assert paused.get_json()["paused_reason"] == "INC-7 maintenance"
    resumed = client.post("/admin/api/destinations/orders/resume", json={}, headers=H)
    assert resumed.status_code == 200 and resumed.get_json()["state"] == "active"  # the circuit closed too
    client.post("/admin/api/destinations/orders/pause", headers=H)  # a bodiless POST is fine
    post(app, "evt_2")
    forward(app)
    assert len(service.seen) == 1  # paused: nothing leased
    assert client.post("/admin/api/destinations/orders/resume", headers=H).status_code == 200
    forward(app)
    assert sorted(service.ids()[1:]) == ["evt_1", "evt_2"]
    assert [tuple(r) for r in rows(app, "SELECT status FROM deliveries")] == [("delivered",), ("delivered",)]


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_a_burst_drain_ends_at_an_open_circuit_and_sends_again_after_its_probe(
    request: pytest.FixtureRequest, db: str, service: destination.Destination
) -> None:
    """The forwarder's drain (tests, ``webhooks worker --burst``) counts an open circuit's
    deliveries as waiting, like a paused destination's: it ends at once instead of spinning to its
    timeout, and once the probe's time has come they are due and sent."""
    service.answer = lambda n, seen: (500, {}, b"down") if n == 1 else (200, {}, b"ok")
    dests = {"orders": destination.config(service, circuit_failures=1, retry_schedule=[0, 0], probe_seconds=3600)}
    app = forwarding(request, db, dests, ["orders"])
    post(app, "evt_1")
    drain(app)
    rt = runtime(app)
    forwarder = dispatcher.Forwarder(rt.sessions, rt.settings.destinations)
    try:
        assert dispatcher.drain(forwarder, timeout=30)  # idle: the circuit is open for an hour
        assert len(service.seen) == 1 and listed(app.test_client())["orders"]["state"] == "open"
        with rt.sessions() as session, session.begin():
            session.execute(update(DestinationState).values(probe_at=datetime.now(UTC) - timedelta(seconds=1)))
        assert dispatcher.drain(forwarder, timeout=30)
    finally:
        forwarder.stop()
    assert service.ids() == ["evt_1", "evt_1"]  # the probe sent it: delivered
    assert [tuple(r) for r in rows(app, "SELECT status FROM deliveries")] == [("delivered",)]


def test_pause_and_resume_follow_the_api_rules(
    request: pytest.FixtureRequest, service: destination.Destination
) -> None:
    client = forwarding(request, "sqlite", {"orders": destination.config(service)}, ["orders"]).test_client()
    for verb in ("pause", "resume"):
        unknown = client.post(f"/admin/api/destinations/nope/{verb}", json={}, headers=H)
        assert unknown.status_code == 404 and unknown.get_json() == {"error": "not_found"}
        assert client.post(f"/admin/api/destinations/orders/{verb}", json={}).status_code == 401
        form = client.post(f"/admin/api/destinations/orders/{verb}", data={"reason": "x"}, headers=H)
        assert form.status_code == 415
        cross = client.post(
            f"/admin/api/destinations/orders/{verb}", json={}, headers=H | {"Origin": "https://evil.example"}
        )
        assert cross.status_code == 403
    assert listed(client)["orders"]["state"] == "active"  # none of them paused it
    bad = client.post("/admin/api/destinations/orders/pause", json={"reason": "a\x00b"}, headers=H)
    assert bad.status_code == 400 and bad.get_json() == {"error": "bad_reason"}


@pytest.mark.parametrize("reason", [{"why": "x"}, ["x"], 7, True, "x" * 501])
def test_a_pause_reason_is_a_string_of_at_most_500_characters(
    request: pytest.FixtureRequest, service: destination.Destination, reason: Any
) -> None:
    """Anything else was stored as its Python repr (issue 30)."""
    client = forwarding(request, "sqlite", {"orders": destination.config(service)}, ["orders"]).test_client()
    for verb in ("pause", "resume"):
        bad = client.post(f"/admin/api/destinations/orders/{verb}", json={"reason": reason}, headers=H)
        assert bad.status_code == 400 and bad.get_json() == {"error": "bad_reason"}
    assert listed(client)["orders"]["state"] == "active" and listed(client)["orders"]["paused_reason"] is None
    longest = client.post("/admin/api/destinations/orders/pause", json={"reason": "y" * 500}, headers=H)
    assert longest.status_code == 200 and longest.get_json()["paused_reason"] == "y" * 500


def test_the_event_detail_lists_each_delivery_with_every_attempt(
    request: pytest.FixtureRequest, service: destination.Destination
) -> None:
    service.answer = lambda n, seen: (500, {}, b"boom") if n == 1 else (200, {}, b"ok")
    app = forwarding(request, "sqlite", {"orders": destination.config(service, retry_schedule=[0, 0])}, ["orders"])
    post(app, "evt_1")
    forward(app)
    detail = app.test_client().get("/admin/api/events/stripe/evt_1", headers=H).get_json()
    [delivery] = detail["deliveries"]
    history = delivery.pop("history")
    assert delivery | {"delivered_at": None} == {
        "destination": "orders",
        "status": "delivered",
        "attempts": 2,
        "last_status_code": 200,
        "last_error": None,
        "delivered_at": None,
        "next_attempt_at": None,
        "forced": False,
        "trace_id": None,  # tracing off
    }
    assert [(a["number"], a["outcome"], a["status_code"], a["error"], a["response"]) for a in history] == [
        (1, "error", 500, "HTTP 500", "boom"),
        (2, "delivered", 200, None, "ok"),
    ]
    assert all(a["seconds"] >= 0 and a["started_at"].endswith("Z") for a in history)


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_replay_to_a_destination_resends_backfills_and_is_audited(
    request: pytest.FixtureRequest, db: str, service: destination.Destination, other: destination.Destination
) -> None:
    dests = {"orders": destination.config(service), "audit": destination.config(other)}
    app = forwarding(request, db, dests, ["orders"])
    client = app.test_client()
    sample_handlers.FAIL_TYPES.add("charge.refunded")
    try:
        for event_id in ("evt_1", "evt_2"):
            post(app, event_id)
        post(app, "evt_bad", "charge.refunded")  # failed: never processed, so never forwarded
        forward(app)
    finally:
        sample_handlers.FAIL_TYPES.clear()
    assert sorted(service.ids()) == ["evt_1", "evt_2"] and other.seen == []

    dispatcher._wake.clear()
    one = client.post(
        "/admin/api/events/stripe/evt_1/replay", json={"destination": "orders", "reason": "lost it"}, headers=H
    )
    assert dispatcher._wake.is_set()  # this process's forwarder is told at once
    assert one.status_code == 202 and one.get_json()["destination"] == "orders"
    assert one.get_json()["status"] == "pending"
    assert rows(app, "SELECT status, attempts, forced FROM deliveries WHERE event_id = 'evt_1'") == [
        ("pending", 0, True)
    ]
    [(filter_, count)] = rows(app, "SELECT filter, count FROM replays")
    assert count == 1 and loaded(filter_) == {"provider": "stripe", "event_id": "evt_1", "destination": "orders"}
    assert rows(app, "SELECT status FROM events WHERE event_id = 'evt_1'") == [("processed",)]  # not reprocessed
    forward(app)
    assert service.ids().count("evt_1") == 2
    assert [s.id for s in service.verified() if s.headers["webhooks-event-id"] == "evt_1"] == [
        message_id("stripe", "evt_1", "orders")
    ] * 2  # the same webhook-id: the destination dedups on it

    body = {"endpoint": "stripe", "destination": "audit", "reason": "backfill the new service"}
    dry = client.post("/admin/api/events/replay", json=body | {"dry_run": True}, headers=H)
    assert dry.status_code == 200 and dry.get_json()["count"] == 2  # the processed two, not evt_bad
    assert dry.get_json()["filter"] == {"provider": "stripe", "destination": "audit"}
    bulk = client.post("/admin/api/events/replay", json=body, headers=H)
    assert bulk.status_code == 202 and sorted(bulk.get_json()["event_ids"]) == [
        ["stripe", "evt_1"],
        ["stripe", "evt_2"],
    ]
    forward(app)
    assert sorted(other.ids()) == ["evt_1", "evt_2"] and all(s.verified for s in other.seen)
    missing = client.post("/admin/api/events/stripe/evt_no/replay", json={"destination": "audit"}, headers=H)
    assert missing.status_code == 404 and missing.get_json() == {"error": "not_found"}
    refused = client.post(
        "/admin/api/events/stripe/evt_bad/replay", json={"destination": "audit", "reason": "x"}, headers=H
    )
    assert refused.status_code == 409 and refused.get_json() == {"error": "not_processed"}
    for path, extra in (("/admin/api/events/stripe/evt_1/replay", {}), ("/admin/api/events/replay", {"q": "evt_1"})):
        unknown = client.post(path, json={"destination": "nope", "reason": "x"} | extra, headers=H)
        assert unknown.status_code == 400 and unknown.get_json() == {"error": "unknown_destination"}
    assert [len(loaded(ids)) for (ids,) in rows(app, "SELECT event_ids FROM replays ORDER BY id")] == [1, 2]


def test_the_console_lists_destinations_pauses_and_resends_escaped(
    request: pytest.FixtureRequest, service: destination.Destination
) -> None:
    xss = "<script>alert('x')</script>"
    service.answer = lambda n, seen: (500, {}, xss.encode())
    app = forwarding(request, "sqlite", {"orders": destination.config(service, retry_schedule=[3600])}, ["orders"])
    client = app.test_client()
    post(app, "evt_1")
    forward(app)
    page = client.get("/admin/destinations", headers=H)
    html = page.get_data(as_text=True)
    assert page.status_code == 200 and 'href="/admin/destinations"' in html  # in the nav
    assert '<span class="status active">active</span>' in html and ">1</td>" in html
    assert "script-src" not in page.headers["Content-Security-Policy"]
    assert client.post("/admin/destinations/orders/pause", data={"reason": "x"}, headers=H).status_code == 403
    token = csrf_token(client, "/admin/destinations")
    done = client.post(
        "/admin/destinations/orders/pause", data={"csrf_token": token, "reason": "<b>INC</b>"}, headers=H
    )
    assert done.status_code == 303
    html = client.get(done.headers["Location"], headers=H).get_data(as_text=True)
    assert '<span class="status paused">paused</span>' in html and "&lt;b&gt;INC&lt;/b&gt;" in html
    assert "<b>INC" not in html and 'action="/admin/destinations/orders/resume"' in html
    missing = client.post("/admin/destinations/nope/resume", data={"csrf_token": token}, headers=H)
    assert missing.status_code == 404

    event = client.get("/admin/events/stripe/evt_1", headers=H).get_data(as_text=True)
    assert "<h2>Deliveries</h2>" in event and "<script>alert" not in event
    assert "&lt;script&gt;alert(" in event and '<span class="status error">error</span>' in event
    assert 'name="destination" value="orders"' in event and "Re-send to orders" in event
    token = csrf_token(client, "/admin/events/stripe/evt_1")
    form = {"csrf_token": token, "destination": "orders", "reason": "try again"}
    resent = client.post("/admin/events/stripe/evt_1/replay", data=form, headers=H)
    assert resent.status_code == 303 and "resent=orders" in resent.headers["Location"]
    assert "Re-send to orders queued" in client.get(resent.headers["Location"], headers=H).get_data(as_text=True)
    assert rows(app, "SELECT attempts, forced, next_attempt_at <= status_at FROM deliveries") == [(0, True, True)]


def test_the_cli_replays_to_a_destination(
    request: pytest.FixtureRequest, service: destination.Destination, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = forwarding(request, "sqlite", {"orders": destination.config(service)}, ["orders"])
    post(app, "evt_1")
    forward(app)
    toml = tmp_path / "webhooks.toml"
    toml.write_text(
        f'[endpoints.stripe]\nprovider = "stripe"\nsecrets = ["{STRIPE_SECRET}"]\nforward = ["orders"]\n'
        f'[destinations.orders]\nurl = "{service.url}"\nsecrets = ["{destination.SECRET}"]\nallow_private = true\n'
    )
    monkeypatch.setenv("DATABASE_URL", app.extensions["webhooks"].settings.database_url)
    monkeypatch.setenv("WEBHOOKS_CONFIG", str(toml))
    monkeypatch.delenv("REDIS_URL", raising=False)
    runner = CliRunner()
    dry = runner.invoke(main, ["events", "replay", "--endpoint", "stripe", "--destination", "orders", "--dry-run"])
    assert dry.exit_code == 0 and "1 event(s) match" in dry.output and "re-send to orders" in dry.output
    args = ["events", "replay", "stripe", "evt_1", "--destination", "orders", "--reason", "cli"]
    done = runner.invoke(main, args)
    assert done.exit_code == 0 and "re-sending stripe/evt_1 to orders" in done.output, done.output
    unknown = runner.invoke(main, [*args[:4], "--destination", "nope", "--reason", "cli"])
    assert unknown.exit_code != 0 and "unknown_destination" in unknown.output
    forward(app)
    assert service.ids() == ["evt_1", "evt_1"]
    assert rows(app, "SELECT who FROM replays")[0][0].startswith("cli:")


SEED = """
    INSERT INTO deliveries (endpoint, event_id, destination, message_id, status, event_type, forced, attempts, lease,
                            next_attempt_at, created_at, status_at)
    SELECT 'stripe', 'evt_' || g, 'orders', 'msg_' || g, CASE WHEN mod(g, 1000) = 0 THEN 'pending' ELSE 'delivered' END,
           'payment_intent.succeeded', false, 1, 1, now(), now(), now()
    FROM generate_series(1, 100000) AS g"""


def test_the_pending_count_reads_only_the_partial_index_on_postgresql(request: pytest.FixtureRequest) -> None:
    from tests.admin.test_console_pages import explain
    from webhooks.forward.backlog import pending_query

    app = forwarding(request, "postgres", {}, [])
    engine = app.extensions["webhooks"].engine
    with engine.begin() as conn:
        conn.exec_driver_sql(SEED)
        conn.exec_driver_sql("ANALYZE deliveries")
    plan = explain(app, pending_query(["orders", "audit"]))
    # Either partial index of pending rows (the planner picks): delivered history is never read.
    assert ("ix_deliveries_due" in plan or "ix_deliveries_object" in plan) and "Seq Scan" not in plan, plan
    assert listed(app.test_client()) == {}  # none configured: none listed, whatever the table holds
