"""The store's rules, each proved once on both adapters (SQLite and PostgreSQL + Redis): the
``any_app`` fixture runs every test on each. The behaviour tests elsewhere (receiver, worker,
sweeper, console) stay as they are; these pin the rules of ``webhooks.store.transitions``."""

from __future__ import annotations

# the worker section's imports
import itertools
import json
import threading
import time
from datetime import UTC, datetime

import pytest
from flask import Flask

from tests.conftest import rows, runtime, stripe_event
from tests.test_processing import deliver_stripe
from webhooks.jobs.process import process_event, work
from webhooks.store import claims

# ===== the receiver, the sweeper, replay: a duplicate creates no job; a replay is audited with
# its row change; the sweeper recovers each stranded state ====================================


# ===== the worker: a superseded claim changes nothing; the newest version wins in every order;
# an event abandoned after its last attempt is failed ==========================================



def _state(app: Flask, event_id: str) -> list[object]:
    """Everything processing may change for one event: its row, the objects, the attempts, the
    handlers' writes."""
    return [
        rows(app, "SELECT status, attempts, last_error, processed_at FROM events WHERE event_id = :e", e=event_id),
        rows(app, "SELECT object_type, object_id, version, state FROM objects ORDER BY object_id"),
        rows(app, "SELECT number, status FROM attempts WHERE event_id = :e ORDER BY number", e=event_id),
        rows(app, "SELECT count(*) FROM test_handler_calls WHERE event_id = :e", e=event_id),
    ]


def test_a_superseded_claim_changes_nothing(any_app: Flask) -> None:
    """Two claims of one event (a replay, a recovered job): the first claim's process and fail
    change no row, no object, no attempt; the second processes it; the first still changes nothing."""
    deliver_stripe(any_app, stripe_event("evt_twice"))
    rt = runtime(any_app)
    now, started = datetime.now(UTC), datetime.now(UTC)
    first = rt.store.claim("stripe", "evt_twice", now)
    second = rt.store.claim("stripe", "evt_twice", now)
    assert first is not None and second is not None and (first.attempts, second.attempts) == (1, 2)
    before = _state(any_app, "evt_twice")
    assert rt.store.process(first, work(rt, first), started) == "skipped"
    assert not rt.store.fail("stripe", "evt_twice", first.attempts, True, "Boom: no", "trace", started)
    assert _state(any_app, "evt_twice") == before
    assert rt.store.process(second, work(rt, second), started) == "processed"
    after = _state(any_app, "evt_twice")
    assert after[0][0][:2] == ("processed", 2) and after[2] == [(2, "processed")] and after[3] == [(1,)]
    assert rt.store.process(first, work(rt, first), started) == "skipped"
    assert not rt.store.fail("stripe", "evt_twice", first.attempts, False, "Boom: no", "trace", started)
    assert _state(any_app, "evt_twice") == after
    assert rt.store.claim("stripe", "evt_twice", now) is None  # processed: never claimed again


# Three versions of one object, and a duplicate: a distinct event carrying the oldest version.
VERSIONS = [("a", 1700000001), ("b", 1700000002), ("c", 1700000003), ("dup", 1700000001)]


def test_the_newest_version_wins_in_every_order(any_app: Flask) -> None:
    """Every order of the versions (each event processed twice, the repeat a no-op): the stored
    state is the newest's, written by the newest event."""
    runtime(any_app)
    for n, order in enumerate(itertools.permutations(VERSIONS)):
        obj = f"pi_order_{n}"
        for name, created in order:
            body = stripe_event(f"evt_{n}_{name}", created=created,
                                obj={"id": obj, "object": "payment_intent", "status": name})
            deliver_stripe(any_app, body)
            deliver_stripe(any_app, body)  # a duplicate delivery: no second row, no second job
        for name, _ in order:
            assert process_event("stripe", f"evt_{n}_{name}") == "processed"
            assert process_event("stripe", f"evt_{n}_{name}") == "skipped"
        [(state, last)] = rows(any_app, "SELECT state, last_event_id FROM objects WHERE object_id = :o", o=obj)
        assert last == f"evt_{n}_c", order
        assert (state if isinstance(state, dict) else json.loads(state))["status"] == "c", order
    assert rows(any_app, "SELECT count(*), sum(attempts) FROM events") == [(96, 96)]


@pytest.mark.parametrize("last_try", [True, False])
def test_a_failure_under_the_claim_is_recorded_and_failed_after_the_last_try(any_app: Flask, last_try: bool) -> None:
    deliver_stripe(any_app, stripe_event("evt_fails"))
    rt = runtime(any_app)
    claimed = rt.store.claim("stripe", "evt_fails", datetime.now(UTC))
    assert claimed is not None
    assert rt.store.fail("stripe", "evt_fails", claimed.attempts, last_try, "Boom: down", "trace", datetime.now(UTC))
    assert rows(any_app, "SELECT status, attempts, last_error FROM events") == [
        ("failed" if last_try else "queued", 1, "Boom: down")]
    assert rows(any_app, "SELECT number, status, error FROM attempts") == [(1, "error", "Boom: down")]


def test_an_event_abandoned_by_the_watchdog_after_its_last_attempt_is_failed(any_app: Flask) -> None:
    """The watchdog gives up on a job stuck past its timeout: on SQLite its attempt is recorded
    (failed: it was the last) under its token; on PostgreSQL the stuck transaction holds the row,
    so nothing is recorded and the thread settles it when its call returns."""
    deliver_stripe(any_app, stripe_event("evt_stuck"))
    rt = runtime(any_app)
    claimed = rt.store.claim("stripe", "evt_stuck", datetime.now(UTC))
    assert claimed is not None
    claim = claims.Claim("stripe", "evt_stuck", claimed.attempts, True, datetime.now(UTC), time.monotonic(), "stripe")
    sqlite = rt.engine.dialect.name == "sqlite"
    with claims.running(claim):
        assert claims.abandon(rt, threading.get_ident(), 5.0) is sqlite
    assert claim.abandoned is sqlite
    if sqlite:
        [(status, error)] = rows(any_app, "SELECT status, last_error FROM events")
        assert status == "failed" and error.startswith("JobTimeoutException")
        assert rows(any_app, "SELECT number, status FROM attempts") == [(1, "error")]
        assert rt.store.process(claimed, work(rt, claimed), datetime.now(UTC)) == "skipped"  # its late finish
    else:
        assert rows(any_app, "SELECT status FROM events") == [("processing",)]
        assert rows(any_app, "SELECT count(*) FROM attempts") == [(0,)]
