"""Once: an event reaches each destination once, however often the provider sends it and however
often an operator replays it; only a replay of the delivery itself sends it again, under the same
``webhook-id`` and ``Idempotency-Key`` (also after a retry that follows a 500)."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import UTC, datetime

import pytest
from flask import Flask

from tests.conftest import drain, rows, runtime, stripe_event, wait_until
from tests.forward.conftest import Script, forwarding, forwarding_app, post_concurrently, serving, settle_all
from tests.support import destination
from webhooks.admin.replay import ReplayError, replay_one
from webhooks.forward import deliveries
from webhooks.forward.signing import message_id

pytestmark = pytest.mark.slow
COPIES = 20


def replay_concurrently(app: Flask, event_id: str) -> None:
    """``COPIES`` operators replaying the event at once (the admin API's function)."""
    rt = runtime(app)
    start = threading.Barrier(COPIES)
    errors: list[BaseException] = []

    def replay() -> None:
        start.wait()
        try:
            replay_one(rt, "stripe", event_id, who="test", reason=None)
        except ReplayError as exc:  # another copy is processing it right now
            if exc.reason != "in_progress":
                errors.append(exc)
        except BaseException as exc:  # an operator would have got a 500: e.g. two replays deleting one job
            errors.append(exc)

    threads = [threading.Thread(target=replay) for _ in range(COPIES)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_duplicates_and_replays_forward_each_event_once_per_destination(
    request: pytest.FixtureRequest, db: str
) -> None:
    # The re-send below first meets a 500, then is retried: requests 1 and 2 of "a" are the first
    # send and that 500.
    script_a = Script(plan=lambda n: (500, {}, b"boom") if n == 2 else (200, {}, b"ok"))
    script_b = Script()
    with serving(script_a) as a, serving(script_b) as b:
        dests = {
            "a": destination.config(a, retry_schedule=[0.1, 0.1]),
            "b": destination.config(b, retry_schedule=[0.1, 0.1]),
        }
        app = forwarding_app(request, db, dests, ["a", "b"])
        body = stripe_event("evt_once")
        with forwarding(app):
            assert set(post_concurrently(app, [body] * COPIES)) == {200}
            drain(app)
            wait_until(lambda: script_a.ok() and script_b.ok())
            replay_concurrently(app, "evt_once")
            drain(app)  # the replays' jobs run; the event is processed again
        settle_all(app)  # whatever they could have made due is sent now
        assert [tuple(r) for r in rows(app, "SELECT status FROM events WHERE event_id = 'evt_once'")] == [
            ("processed",)
        ]
        found = rows(app, "SELECT destination, status, attempts FROM deliveries ORDER BY destination")
        assert [tuple(r) for r in found] == [("a", "delivered", 1), ("b", "delivered", 1)]
        ids = {name: message_id("stripe", "evt_once", name) for name in ("a", "b")}
        assert [x.id for x in script_a.ok()] == [ids["a"]]
        assert [x.id for x in script_b.ok()] == [ids["b"]]
        assert all(s.verified for s in a.seen + b.seen)

        # The delivery's own replay sends it again: a 500 first, retried; the same id throughout.
        with runtime(app).sessions.begin() as session:
            assert deliveries.replay(session, [("stripe", "evt_once")], "a", datetime.now(UTC)) == [
                ("stripe", "evt_once")
            ]
        with forwarding(app):
            wait_until(lambda: len(script_a.ok()) == 2)
        assert [s.id for s in a.seen] == [ids["a"]] * 3
        assert {s.headers["idempotency-key"] for s in a.seen} == {ids["a"]}
        assert Counter(x.status for x in script_a.answered) == {200: 2, 500: 1}
        assert [x.id for x in script_b.ok()] == [ids["b"]]  # the other destination is not re-sent
        attempts = rows(app, "SELECT outcome, status_code FROM delivery_attempts WHERE destination = 'a' ORDER BY id")
        assert [tuple(r) for r in attempts] == [("delivered", 200), ("error", 500), ("delivered", 200)]
