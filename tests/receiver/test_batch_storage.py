"""Hostile senders II, data: a batch of any real size is stored whole and once, its body kept once
for all its events, and a purged event can never be minted again (on SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask import Flask

from tests.conftest import base_config, drain, make_app, rows, runtime
from tests.support.catalogue import all_endpoints, genuine
from webhooks.store.purge import Plan, expire_tombstones, purge

DAY = timedelta(days=1)


@pytest.fixture(params=["sqlite", "postgres"])
def catalogue_app(request: pytest.FixtureRequest) -> Flask:
    """Every provider kind configured, on the embedded default and on PostgreSQL + Redis."""
    if request.param == "sqlite":
        return make_app(base_config(request.getfixturevalue("sqlite_url"), ENDPOINTS=all_endpoints()))
    pg, rurl = request.getfixturevalue("pg_url"), request.getfixturevalue("redis_url")
    return make_app(base_config(pg, REDIS_URL=rurl, ENDPOINTS=all_endpoints()))


def sendgrid_batch(count: int, pad: int = 0) -> bytes:
    """A SendGrid Event Webhook body of ``count`` events (``pad`` more bytes in each)."""
    events = [
        {
            "email": f"user{i}@example.com",
            "timestamp": 1700000000 + i,
            "event": "delivered",
            "sg_event_id": f"sg_{i:06d}",
            "sg_message_id": f"msg{i // 10}.filter0001",
            "note": "x" * pad,
        }
        for i in range(count)
    ]
    return json.dumps(events).encode() + b"\r\n"


def post(app: Flask, name: str, payload: bytes) -> Any:
    body, headers, path = genuine(app, name, payload)
    return app.test_client().post(path, data=body, headers=headers)


def stored_bytes(app: Flask) -> int:
    """Bytes of payload and body kept for the events: every event's own row plus ``bodies``."""
    ((events,),) = rows(app, "SELECT COALESCE(SUM(LENGTH(payload)), 0) FROM events")
    ((bodies,),) = rows(app, "SELECT COALESCE(SUM(LENGTH(body)), 0) FROM bodies")
    return int(events) + int(bodies)


def test_a_genuine_768_kb_sendgrid_batch_is_stored_whole_and_once(
    catalogue_app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding 1: 3 856 events made one INSERT pass PostgreSQL's 65 535 parameters (503 forever).
    Finding 2: the body was stored once per event (4 800 × 768 KB here)."""
    body = sendgrid_batch(4800)
    assert 740_000 <= len(body) <= 768 * 1024
    response = post(catalogue_app, "sendgrid", body)
    assert response.status_code == 200, response.data
    assert rows(catalogue_app, "SELECT COUNT(*), COUNT(DISTINCT event_id) FROM events") == [(4800, 4800)]
    assert rows(catalogue_app, "SELECT COUNT(*) FROM bodies") == [(1,)]
    # The delivery's exact bytes once, and each event's own item: about twice the body, not 4 800 times.
    assert len(body) < stored_bytes(catalogue_app) < 2.2 * len(body)
    ((raw,),) = rows(catalogue_app, "SELECT body FROM bodies")
    assert bytes(raw) == body

    # A replayed capture of the batch stores nothing more and queues nothing: its body is known,
    # so its 4 800 rows are not even built or sent to the database.
    from webhooks.receiver import batch

    before, stores = stored_bytes(catalogue_app), []
    monkeypatch.setattr(batch.GroupCommit, "store", lambda self, item: stores.append(item))
    again = post(catalogue_app, "sendgrid", body)
    assert again.status_code == 200
    assert stored_bytes(catalogue_app) == before and stores == []
    assert rows(catalogue_app, "SELECT COUNT(*) FROM events") == [(4800,)]
    assert rows(catalogue_app, "SELECT COUNT(*) FROM bodies") == [(1,)]


def test_each_batch_event_is_its_own_item_for_handlers_api_and_console(catalogue_app: Flask) -> None:
    """What handlers, the API and the console see of a batch event stays the same."""
    from tests.conftest import admin_headers

    body = sendgrid_batch(3)
    assert post(catalogue_app, "sendgrid", body).status_code == 200
    drain(catalogue_app)
    assert rows(catalogue_app, "SELECT status FROM events ORDER BY event_id") != []
    ((payload, headers, index),) = rows(
        catalogue_app, "SELECT payload, headers, item_index FROM events WHERE event_id = 'sg_000001'"
    )
    assert json.loads(bytes(payload)) == json.loads(body)[1] and index == 1
    assert (json.loads(headers) if isinstance(headers, str) else headers) == {}  # kept once, with the body

    client = catalogue_app.test_client()
    detail = client.get("/admin/api/events/sendgrid/sg_000001", headers=admin_headers()).get_json()
    assert detail["payload"] == body.decode() and detail["item_index"] == 1
    assert "X-Twilio-Email-Event-Webhook-Signature" in detail["headers"]
    raw = client.get("/admin/events/sendgrid/sg_000001?format=raw", headers=admin_headers())
    assert raw.data == body
    page = client.get("/admin/events/sendgrid/sg_000001", headers=admin_headers()).get_data(as_text=True)
    assert "This event's item" in page and "user1@example.com" in page


def test_purging_a_batchs_last_event_drops_its_body(catalogue_app: Flask) -> None:
    body = sendgrid_batch(4)
    assert post(catalogue_app, "sendgrid", body).status_code == 200
    drain(catalogue_app)
    rt = runtime(catalogue_app)
    with rt.engine.begin() as conn:
        conn.exec_driver_sql(
            "UPDATE events SET received_at = %s WHERE event_id IN ('sg_000000', 'sg_000001')"
            if rt.engine.dialect.name == "postgresql"
            else "UPDATE events SET received_at = ? WHERE event_id IN ('sg_000000', 'sg_000001')",
            (datetime.now(UTC) - 40 * DAY,),
        )
    plan = Plan(30 * DAY, 30 * DAY)
    assert purge(rt.sessions, plan, kinds=set()) == 2
    assert rows(catalogue_app, "SELECT COUNT(*) FROM bodies") == [(1,)]  # two events still use it
    with rt.engine.begin() as conn:
        conn.exec_driver_sql(
            "UPDATE events SET received_at = received_at - INTERVAL '40 days'"
            if rt.engine.dialect.name == "postgresql"
            else "UPDATE events SET received_at = datetime(received_at, '-40 days')"
        )
    assert purge(rt.sessions, plan, kinds=set()) == 2
    assert rows(catalogue_app, "SELECT COUNT(*) FROM bodies") == [(0,)]


@pytest.mark.parametrize("kind", ["github", "shopify", "twilio", "hmac_by_header", "razorpay"])
def test_a_purged_event_is_never_minted_again(catalogue_app: Flask, kind: str) -> None:
    """Finding 3: purging removed the id and the replay key, so a captured delivery of a kind that
    signs no timestamp was stored and processed again after retention."""
    body, headers, path = genuine(catalogue_app, kind)
    client = catalogue_app.test_client()
    assert client.post(path, data=body, headers=headers).status_code == 200
    drain(catalogue_app)
    ((event_id, key),) = rows(catalogue_app, "SELECT event_id, replay_key FROM events")
    assert key is not None
    rt = runtime(catalogue_app)
    assert purge(rt.sessions, Plan(timedelta(0), timedelta(0)), kinds=set(), force=True) == 1
    assert rows(catalogue_app, "SELECT endpoint, event_id, replay_key FROM tombstones") == [(kind, event_id, key)]

    # The captured delivery, as it was: a duplicate, nothing stored, nothing queued or run.
    response = client.post(path, data=body, headers=headers)
    assert response.status_code == 200
    drain(catalogue_app)
    assert rows(catalogue_app, "SELECT COUNT(*) FROM events") == [(0,)]
    # Re-labelled with another id (the headers the signature does not cover): a replay.
    relabelled = dict(headers)
    for name in (
        "X-GitHub-Delivery",
        "X-Shopify-Webhook-Id",
        "I-Twilio-Idempotency-Token",
        "X-Event-Id",
        "X-Razorpay-Event-Id",
    ):
        if name in relabelled:
            relabelled[name] = "a-new-id-0001"
    relabelled.setdefault("I-Twilio-Idempotency-Token", "a-new-id-0001")
    response = client.post(path, data=body, headers=relabelled)
    assert response.status_code == 200
    assert rows(catalogue_app, "SELECT COUNT(*) FROM events") == [(0,)]
    assert rows(catalogue_app, "SELECT count FROM rejection_counts WHERE reason = 'replayed_signature'") == [(1,)]

    # Tombstones have their own, longer retention; once expired the id is forgotten.
    assert expire_tombstones(rt.sessions, datetime.now(UTC) + DAY) == 1
    assert client.post(path, data=body, headers=headers).status_code == 200
    assert rows(catalogue_app, "SELECT COUNT(*) FROM events") == [(1,)]


def test_tombstones_outlive_every_event_window_by_default() -> None:
    assert Plan(30 * DAY, 60 * DAY).tombstone_window() == 365 * DAY
    assert Plan(300 * DAY, 400 * DAY).tombstone_window() == 800 * DAY
    assert Plan(DAY, DAY, tombstones_older_than=90 * DAY).tombstone_window() == 90 * DAY


def test_purge_cli_refuses_tombstones_shorter_than_events(app: Flask, tmp_path: Any, monkeypatch: Any) -> None:
    from click.testing import CliRunner

    from webhooks.service.cli import main

    monkeypatch.setenv("DATABASE_URL", app.extensions["webhooks"].settings.database_url)
    result = CliRunner().invoke(main, ["purge", "--older-than", "40d", "--tombstones-older-than", "10d"])
    assert result.exit_code == 2 and "tombstones" in result.output
