"""``GET /admin/api/stream`` (docs/listen.md), on both databases: stored events as Server-Sent
Events, the backlog then live, each once, by glob, resumable from a cursor, capped per process,
audited, to a read-only token; and what idle listeners cost (one poll a second per process)."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask
from flask.testing import FlaskClient

from tests.conftest import (
    admin_headers,
    adyen_body,
    adyen_item,
    runtime,
    stripe_event,
    stripe_headers,
    wait_until,
)
from webhooks.admin import listeners as hubs
from webhooks.admin.tokens import create as create_token


class Stream:
    """One open stream read frame by frame (the test client runs the generator in this thread)."""

    def __init__(self, client: FlaskClient, query: str = "", headers: dict[str, str] | None = None) -> None:
        self.response = client.get(f"/admin/api/stream{query}", headers=headers or admin_headers(), buffered=False)
        self.status = self.response.status_code
        self._chunks: Iterator[bytes] = iter(self.response.response)
        self._buffer = b""

    def events(self, count: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        """The next ``count`` events (fails past ``timeout``)."""
        found: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while len(found) < count:
            assert time.monotonic() < deadline, f"{len(found)} of {count} events by the deadline: {found}"
            while b"\n\n" not in self._buffer:
                self._buffer += next(self._chunks)
            block, self._buffer = self._buffer.split(b"\n\n", 1)
            lines = dict(line.split(": ", 1) for line in block.decode().splitlines() if not line.startswith(":"))
            if lines.get("event") == "event":
                message = json.loads(lines["data"])
                assert lines["id"] == message["cursor"]
                found.append(message)
        return found

    def close(self) -> None:
        self.response.close()


def post_stripe(client: FlaskClient, event_id: str, type_: str = "payment_intent.succeeded") -> None:
    body = stripe_event(event_id, type_)
    assert client.post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200


def age(app: Flask, seconds: float, *event_ids: str) -> None:
    """Make these events look received ``seconds`` ago (what a stream long open would have seen)."""
    at = datetime.now(UTC) - timedelta(seconds=seconds)
    with runtime(app).engine.begin() as conn:
        for event_id in event_ids:
            conn.execute(
                sa.text("UPDATE events SET received_at = :at WHERE event_id = :id"), {"at": at, "id": event_id}
            )


def test_the_backlog_then_live_events_each_once_in_the_order_stored(any_app: Flask) -> None:
    client = any_app.test_client()
    for i in range(3):
        post_stripe(client, f"evt_old_{i}")
    stream = Stream(client, "?since=1h")
    try:
        old = stream.events(3)
        assert [m["event_id"] for m in old] == ["evt_old_0", "evt_old_1", "evt_old_2"]
        for i in range(3):
            post_stripe(client, f"evt_new_{i}")
        post_stripe(client, "evt_new_0")  # a duplicate delivery: no second event, no second frame
        post_stripe(client, "evt_new_3")
        new = stream.events(4)
        assert [m["event_id"] for m in new] == ["evt_new_0", "evt_new_1", "evt_new_2", "evt_new_3"]
        cursors = [m["cursor"] for m in old + new]
        assert cursors == sorted(cursors)
        first = old[0]
        body = stripe_event("evt_old_0")
        assert base64.b64decode(first["payload"]) == body and first["delivery"]["body"] is None  # the same bytes
        assert first["delivery"]["headers"]["Stripe-Signature"].startswith("t=")
        assert (first["kind"], first["type"], first["tolerance_seconds"]) == ("stripe", "payment_intent.succeeded", 300)
    finally:
        stream.close()


def test_a_batch_events_own_item_and_the_whole_delivery(any_app: Flask) -> None:
    client = any_app.test_client()
    body = adyen_body(adyen_item("PSP_A", "AUTHORISATION"), adyen_item("PSP_B", "AUTHORISATION"))
    assert client.post("/webhooks/adyen", data=body, headers={"Content-Type": "application/json"}).status_code == 200
    stream = Stream(client, "?since=10m&endpoint=adyen")
    try:
        items = stream.events(2)
        assert {base64.b64decode(m["delivery"]["body"]) for m in items} == {body}
        assert [m["item_index"] for m in items] == [0, 1]
        assert [json.loads(base64.b64decode(m["payload"]))["pspReference"] for m in items] == ["PSP_A", "PSP_B"]
    finally:
        stream.close()


def test_globs_choose_endpoints_and_types(any_app: Flask) -> None:
    client = any_app.test_client()
    post_stripe(client, "evt_invoice", "invoice.paid")
    post_stripe(client, "evt_charge", "charge.refunded")
    post_stripe(client, "evt_pi", "payment_intent.created")
    stream = Stream(client, "?since=1h&type=charge.*,payment_intent.*&endpoint=str*")
    try:
        assert [m["event_id"] for m in stream.events(2)] == ["evt_charge", "evt_pi"]
        post_stripe(client, "evt_invoice_2", "invoice.paid")
        post_stripe(client, "evt_charge_2", "charge.succeeded")
        assert [m["event_id"] for m in stream.events(1)] == ["evt_charge_2"]
    finally:
        stream.close()


def test_a_resumed_stream_begins_shortly_before_its_cursor(any_app: Flask) -> None:
    """``Last-Event-ID`` resumes: what was received more than ``OVERLAP`` before the cursor is not
    sent again; the overlap itself is (the client skips the keys it posted)."""
    client = any_app.test_client()
    for event_id in ("evt_a", "evt_b", "evt_c", "evt_d"):
        post_stripe(client, event_id)
    age(any_app, 120, "evt_a")
    age(any_app, 60, "evt_b")
    age(any_app, 30, "evt_c")
    stream = Stream(client, "?since=1h")
    try:
        cursor_of_b = stream.events(2)[1]["cursor"]
    finally:
        stream.close()
    resumed = Stream(client, headers={**admin_headers(), "Last-Event-ID": cursor_of_b})
    try:
        assert [m["event_id"] for m in resumed.events(3)] == ["evt_b", "evt_c", "evt_d"]
    finally:
        resumed.close()


def test_bad_requests_say_which_value(app: Flask) -> None:
    client = app.test_client()
    cases = {
        "?since=40d": "bad_since",
        "?since=soon": "bad_since",
        "?cursor=yesterday": "bad_cursor",
        "?cursor=2026-01-01T00:00:00": "bad_cursor",  # no time zone
        "?endpoint=" + ",".join(["a"] * 21): "bad_endpoint",
        "?type=" + "x" * 201: "bad_type",
    }
    for query, reason in cases.items():
        answer = client.get(f"/admin/api/stream{query}", headers=admin_headers())
        assert (answer.status_code, answer.get_json()) == (400, {"error": reason}), query
    assert client.get("/admin/api/stream").status_code == 401


def test_a_read_only_token_listens_and_each_stream_is_audited(any_app: Flask) -> None:
    client = any_app.test_client()
    with runtime(any_app).sessions() as session:  # create commits
        token = create_token(session, "laptop", True, now=datetime.now(UTC))
    post_stripe(client, "evt_audited")
    stream = Stream(client, "?since=5m&type=payment_*", headers={"Authorization": f"Bearer {token}"})
    assert stream.status == 200
    assert [m["event_id"] for m in stream.events(1)] == ["evt_audited"]
    listed = client.get("/admin/api/listeners", headers=admin_headers()).get_json()["listeners"]
    assert listed[0]["who"] == "laptop" and listed[0]["ended_at"] is None
    assert (listed[0]["types"], listed[0]["endpoints"], listed[0]["resumed_from"]) == (["payment_*"], ["*"], "5m")
    stream.close()
    listed = client.get("/admin/api/listeners", headers=admin_headers()).get_json()["listeners"]
    assert (listed[0]["sent"], listed[0]["ended_because"]) == (1, "closed") and listed[0]["ended_at"]


def test_listeners_past_the_cap_are_answered_429(app: Flask) -> None:
    app.extensions["webhooks_listeners_max"] = 2
    client = app.test_client()
    streams = [Stream(client), Stream(client)]
    third = client.get("/admin/api/stream", headers=admin_headers())
    assert third.status_code == 429 and third.get_json()["error"] == "too_many_listeners"
    assert third.headers["Retry-After"] == "5"
    streams[0].close()
    again = Stream(client)
    assert again.status == 200
    for stream in (streams[1], again):
        stream.close()


def test_idle_listeners_cost_one_poll_a_second_and_rows_are_read_once(any_app: Flask) -> None:
    """Five open streams and no events: the process polls at most once a second, not once per
    stream; ten events then are read whole once for all five."""
    client = any_app.test_client()
    streams = [Stream(client, "?endpoint=stripe") for _ in range(5)]
    hub = hubs.hub(runtime(any_app))
    try:
        wait_until(lambda: hub.polls >= 1)
        before, started = hub.polls, time.monotonic()
        time.sleep(3.0)  # a window to count polls in, not an order of events
        elapsed = time.monotonic() - started
        assert hub.polls - before <= elapsed / hubs.IDLE_POLL + 1, (hub.polls - before, elapsed)
        read_before = hub.rows_read
        for i in range(10):
            post_stripe(client, f"evt_fan_{i}")
        for stream in streams:
            assert [m["event_id"] for m in stream.events(10)] == [f"evt_fan_{i}" for i in range(10)]
        assert hub.rows_read - read_before == 10
    finally:
        for stream in streams:
            stream.close()
    wait_until(lambda: not hub.listeners)


def test_a_listener_too_far_behind_is_ended_to_resume_from_the_database(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hubs, "QUEUE_MAX", 3)
    listener = hubs.Listener(hubs.Wanted())
    listener.offer([hubs.Frame("e", str(i), "t", "", datetime.now(UTC), b"") for i in range(5)])
    assert listener.behind and len(listener.pending) == 3


def test_the_cap_is_checked_at_start_and_never_passes_half_the_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    from webhooks.admin.stream import listeners_max
    from webhooks.errors import ConfigError

    monkeypatch.delenv("WEB_THREADS", raising=False)
    monkeypatch.delenv("WEBHOOKS_LISTENERS_MAX", raising=False)
    assert listeners_max() == 8
    monkeypatch.setenv("WEB_THREADS", "4")  # two streams may hold two of the four threads, no more
    assert listeners_max() == 2
    for wrong in ("-1", "65", "many"):
        monkeypatch.setenv("WEBHOOKS_LISTENERS_MAX", wrong)
        with pytest.raises(ConfigError, match="WEBHOOKS_LISTENERS_MAX must be a whole number from 0 to 64"):
            listeners_max()
