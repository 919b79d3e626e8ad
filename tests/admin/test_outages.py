"""The console, the admin API and the CLI while the database or Redis is down.

Replays are recorded (audit row and row changes in one commit) before any enqueue, so a replay
while Redis is down answers 2xx saying the sweeper will queue it; the sweeper does, once Redis is
back, and each event is processed exactly once. Every other outage answers 503 naming what is
down, in JSON for the API and a short HTML page for the console; an unexpected error is a bare
500 — never a traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis as redis_lib
from click.testing import CliRunner
from flask import Flask
from flask.testing import FlaskClient

from tests import sample_handlers
from tests.conftest import (
    STRIPE_SECRET,
    admin_headers,
    base_config,
    drain,
    free_port,
    make_app,
    rows,
    runtime,
    stripe_event,
    stripe_headers,
)
from tests.faults.services import Redis
from tests.support.console import admin_urls, csrf_token
from webhooks import create_app
from webhooks.admin import queries
from webhooks.service.cli import main
from webhooks.worker.sweeper import sweep

PENDING = "the sweeper"


@pytest.fixture
def redis_server() -> Iterator[Redis]:
    server = Redis()  # our own redis-server on a spare port, stopped and started by the test
    server.start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgres"])
def outage_app(request: pytest.FixtureRequest, redis_server: Redis) -> Flask:
    database = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    return make_app(base_config(database, REDIS_URL=redis_server.url))


def deliver(client: FlaskClient, event_id: str, type_: str = "payment_intent.succeeded") -> None:
    body = stripe_event(event_id, type_, obj={"id": f"pi_{event_id}", "object": "payment_intent"})
    assert client.post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200


def handler_runs(app: Flask) -> dict[str, int]:
    found = rows(app, "SELECT event_id, count(*) FROM test_handler_calls GROUP BY event_id")
    return {event_id: int(n) for event_id, n in found}


def cli(app: Flask, redis_url: str, monkeypatch: pytest.MonkeyPatch, *args: str) -> Any:
    monkeypatch.setenv("DATABASE_URL", runtime(app).settings.database_url)
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("STRIPE_WEBHOOK_SECRET", STRIPE_SECRET)
    monkeypatch.setenv("WEBHOOKS_CONFIG", "")
    return CliRunner().invoke(main, ["events", *args], catch_exceptions=False)


@pytest.mark.slow
def test_replays_while_redis_is_down_are_audited_then_swept_and_processed_once(
    outage_app: Flask,
    redis_server: Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app, client, headers = outage_app, outage_app.test_client(), admin_headers()
    sample_handlers.FAIL_TYPES.add("charge.refunded")
    deliver(client, "evt_ok")
    deliver(client, "evt_bad", "charge.refunded")
    drain(app)
    sample_handlers.FAIL_TYPES.clear()
    assert dict(rows(app, "SELECT event_id, status FROM events")) == {"evt_ok": "processed", "evt_bad": "failed"}
    assert handler_runs(app) == {"evt_ok": 1}  # a failed attempt's handler run is rolled back

    redis_server.stop()
    deliver(client, "evt_late")  # stored `received` by the receiver
    # single replays: API, console form, CLI
    api = client.post("/admin/api/events/stripe/evt_bad/replay", json={"reason": "api"}, headers=headers)
    assert api.status_code == 202, api.get_data(as_text=True)
    assert api.get_json()["queued"] is False and PENDING in api.get_json()["detail"]
    token = csrf_token(client, "/admin/events/stripe/evt_ok")
    form = client.post(
        "/admin/events/stripe/evt_ok/replay", data={"reason": "page", "csrf_token": token}, headers=headers
    )
    assert form.status_code == 303 and "replayed=pending" in form.headers["Location"]
    page = client.get(form.headers["Location"], headers=headers).get_data(as_text=True)
    assert "Replay recorded in the audit log, but Redis is unavailable" in page
    single = cli(app, redis_server.url, monkeypatch, "replay", "stripe", "evt_late", "--reason", "cli")
    assert single.exit_code == 0, single.output
    assert single.stdout.startswith("recorded stripe/evt_late (audit #3); Redis is unavailable")
    # bulk replays: API, console form, CLI
    bulk = client.post("/admin/api/events/replay", json={"status": "received", "reason": "api bulk"}, headers=headers)
    assert bulk.status_code == 202 and bulk.get_json()["count"] == 3 and bulk.get_json()["queued"] is False
    token = csrf_token(client, "/admin/replay?status=received")
    form = client.post(
        "/admin/replay", data={"status": "received", "reason": "page bulk", "csrf_token": token}, headers=headers
    )
    assert form.status_code == 303 and "pending=1" in form.headers["Location"]
    audit = client.get(form.headers["Location"], headers=headers).get_data(as_text=True)
    assert "Replay #5 recorded, but Redis is unavailable" in audit
    many = cli(app, redis_server.url, monkeypatch, "replay", "--status", "received", "--reason", "cli bulk", "--yes")
    assert many.exit_code == 0, many.output
    assert many.stdout.splitlines()[-1].startswith("recorded 3 event(s) (audit #6); Redis is unavailable")

    audited = rows(app, "SELECT id, who, reason, count FROM replays ORDER BY id")
    assert [(i, who.split(":")[0], reason, n) for i, who, reason, n in audited] == [
        (1, "admin", "api", 1),
        (2, "admin", "page", 1),
        (3, "cli", "cli", 1),
        (4, "admin", "api bulk", 3),
        (5, "admin", "page bulk", 3),
        (6, "cli", "cli bulk", 3),
    ]
    assert {status for (status,) in rows(app, "SELECT status FROM events")} == {"received"}
    assert handler_runs(app) == {"evt_ok": 1}

    redis_server.start()  # back, and empty (no persistence): only the database remembers
    assert sweep(runtime(app), age=0) == 3
    drain(app)
    assert {status for (status,) in rows(app, "SELECT status FROM events")} == {"processed"}
    assert handler_runs(app) == {"evt_ok": 2, "evt_bad": 1, "evt_late": 1}  # once each since the replays
    assert sweep(runtime(app), age=0) == 0


@pytest.mark.slow
def test_bulk_replay_is_all_or_nothing(outage_app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    """An audit insert that fails leaves every row as it was: no replay without its record."""
    client = outage_app.test_client()
    for n in range(3):
        deliver(client, f"evt_{n}")
    drain(outage_app)
    from webhooks.store import sql

    def broken(*args: Any, **kwargs: Any) -> int:
        raise RuntimeError("audit insert failed")

    monkeypatch.setattr(sql, "audit_record", broken)
    answer = client.post(
        "/admin/api/events/replay", json={"status": "processed", "reason": "x"}, headers=admin_headers()
    )
    assert answer.status_code == 500 and answer.get_json() == {"error": "internal"}
    assert {status for (status,) in rows(outage_app, "SELECT status FROM events")} == {"processed"}
    assert rows(outage_app, "SELECT count(*) FROM replays") == [(0,)]


@pytest.fixture
def db_down_app() -> Flask:
    """An app whose PostgreSQL is a closed port."""
    return create_app(base_config(f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/nothing"))


def test_database_down_api_answers_json_503(db_down_app: Flask) -> None:
    client = db_down_app.test_client()
    for method, url, body in [
        ("GET", "/admin/api/events", None),
        ("GET", "/admin/api/events/stripe/evt_1", None),
        ("GET", "/admin/api/replays", None),
        ("GET", "/admin/api/counts", None),
        ("POST", "/admin/api/events/stripe/evt_1/replay", {"reason": "x"}),
        ("POST", "/admin/api/events/replay", {"status": "failed", "reason": "x"}),
    ]:
        answer = client.open(url, method=method, json=body, headers=admin_headers())
        assert answer.status_code == 503, (url, answer.get_data(as_text=True))
        assert answer.get_json() == {"error": "unavailable", "detail": "database unavailable"}
        assert answer.headers["Retry-After"] == "30"


def test_database_down_pages_say_so(db_down_app: Flask) -> None:
    client = db_down_app.test_client()
    for method, url in admin_urls(db_down_app):
        answer = client.open(url, method=method, headers=admin_headers())
        text = answer.get_data(as_text=True)
        # 409: adopting held deliveries under a name nothing is configured under (no database needed)
        assert answer.status_code in (200, 303, 400, 403, 404, 409, 503), (url, answer.status_code, text[:300])
        assert "Traceback" not in text and "Werkzeug Debugger" not in text
    for url in ("/admin/", "/admin/dead", "/admin/audit", "/admin/events/stripe/evt_1", "/admin/replay?status=failed"):
        answer = client.get(url, headers=admin_headers())
        assert answer.status_code == 503 and answer.headers["Retry-After"] == "30", url
        assert answer.mimetype == "text/html"
        assert "The database is unavailable" in answer.get_data(as_text=True)


@pytest.mark.slow
def test_redis_down_answers_503_naming_redis(
    outage_app: Flask, redis_server: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read that needs Redis (the real client, pointed at a stopped server) answers 503 naming it."""
    redis_server.stop()
    connection = runtime(outage_app).queue.connection

    def counts_via_redis(*args: Any, **kwargs: Any) -> Any:
        connection.ping()
        raise AssertionError("Redis is stopped: ping must fail")

    monkeypatch.setattr(queries, "status_counts", counts_via_redis)
    client = outage_app.test_client()
    api = client.get("/admin/api/counts", headers=admin_headers())
    assert api.status_code == 503 and api.headers["Retry-After"] == "30"
    assert api.get_json() == {"error": "unavailable", "detail": "redis unavailable"}
    page = client.get("/admin/", headers=admin_headers())
    assert page.status_code == 503 and "Redis is unavailable" in page.get_data(as_text=True)
    with pytest.raises(redis_lib.RedisError):
        connection.ping()


def test_unexpected_errors_are_a_bare_500(app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    app.config["PROPAGATE_EXCEPTIONS"] = True  # as under debug: only a handled error stays in the app
    secret = "secret-detail-of-the-bug"

    def bug(*args: Any, **kwargs: Any) -> Any:
        raise KeyError(secret)

    monkeypatch.setattr(queries, "page", bug)
    client = app.test_client()
    api = client.get("/admin/api/events", headers=admin_headers())
    assert api.status_code == 500 and api.get_json() == {"error": "internal"}
    page = client.get("/admin/", headers=admin_headers())
    text = page.get_data(as_text=True)
    assert page.status_code == 500 and "Internal error" in text
    assert secret not in text and "Traceback" not in text
    assert client.get("/admin/api/events/stripe/nope", headers=admin_headers()).status_code == 404  # still 404
