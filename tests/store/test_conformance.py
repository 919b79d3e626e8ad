"""The store's rules, each proved once on both adapters (SQLite and PostgreSQL + Redis): the
``any_app`` fixture runs every test on each. The behaviour tests elsewhere (receiver, worker,
sweeper, console) stay as they are; these pin the rules of ``webhooks.store.transitions``."""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from flask import Flask
from rq.job import Job

from tests.conftest import admin_headers, rows, runtime, stripe_event, stripe_headers
from tests.receiver.test_group_commit import pending, queued_jobs, store_as_one_batch
from tests.worker.test_processing import deliver_stripe
from webhooks.admin.replay import ReplayError, replay_one
from webhooks.jobs.process import process_event, work
from webhooks.queue import job_id
from webhooks.runtime import Runtime
from webhooks.store import sqlite as sqlite_store
from webhooks.tables.events import Event
from webhooks.timestamps import aware
from webhooks.vocabulary import Reason
from webhooks.worker import claims
from webhooks.worker.sweeper import sweep

# ===== the receiver, the sweeper, replay: a duplicate creates no job; a replay is audited with
# its row change; the sweeper recovers each stranded state ====================================


def deliver(app: Flask, event_id: str) -> int:
    body = stripe_event(event_id)
    return app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code


def state(app: Flask, event_id: str) -> tuple[str, int]:
    found = rows(app, "SELECT status, attempts FROM events WHERE event_id = :e", e=event_id)
    assert len(found) == 1
    return found[0][0], found[0][1]


def set_row(app: Flask, event_id: str, status: str, attempts: int = 0) -> None:
    """The row as a crash left it (tests only: nothing in the package writes a status but the store)."""
    with runtime(app).engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE events SET status = :s, attempts = :a WHERE event_id = :e"),
            {"s": status, "a": attempts, "e": event_id},
        )


def drop_job(app: Flask, event_id: str) -> None:
    rt = runtime(app)
    Job.fetch(job_id("stripe", event_id), connection=rt.queue.connection).delete()


LEASE = timedelta(seconds=claims.lease(300))  # a claim's lease with the default job timeout


def later() -> datetime:
    return datetime.now(UTC) + timedelta(minutes=5)


def test_a_duplicate_delivery_creates_no_job(any_app: Flask) -> None:
    assert deliver(any_app, "evt_dup") == 200
    assert deliver(any_app, "evt_dup") == 200
    assert rows(any_app, "SELECT count(*) FROM events")[0][0] == 1
    assert queued_jobs(any_app) == {job_id("stripe", "evt_dup")}


def test_two_deliveries_in_one_batch_store_one_row_and_one_job(any_app: Flask) -> None:
    outcomes, sizes = store_as_one_batch(any_app, [pending(any_app, "evt_twice"), pending(any_app, "evt_twice")])
    assert sizes == [2]
    assert sorted(len(o.new) for o in outcomes) == [0, 1]
    assert state(any_app, "evt_twice") == ("queued", 0)
    assert queued_jobs(any_app) == {job_id("stripe", "evt_twice")}


def test_a_replay_is_audited_with_its_row_change(any_app: Flask) -> None:
    assert deliver(any_app, "evt_replayed") == 200
    set_row(any_app, "evt_replayed", "processed", 1)
    drop_job(any_app, "evt_replayed")
    outcome = replay_one(runtime(any_app), "stripe", "evt_replayed", who="ops", reason="customer asked")
    assert outcome.count == 1 and outcome.queued
    assert state(any_app, "evt_replayed") == ("queued", 1)
    audit = rows(any_app, "SELECT id, who, reason, count FROM replays")
    assert [tuple(r) for r in audit] == [(outcome.replay_id, "ops", "customer asked", 1)]
    assert queued_jobs(any_app) == {job_id("stripe", "evt_replayed")}


def test_a_replay_whose_audit_cannot_be_written_changes_no_row(any_app: Flask) -> None:
    assert deliver(any_app, "evt_unaudited") == 200
    set_row(any_app, "evt_unaudited", "failed", 3)
    before = rows(any_app, "SELECT status, status_at FROM events")
    unwritable = {"who": "ops", "reason": "r", "filter": {"endpoint": object()}}  # no JSON holds it
    with pytest.raises(Exception):  # noqa: B017 - whatever the driver raises: the transaction fails
        runtime(any_app).store.replay([("stripe", "evt_unaudited")], unwritable, datetime.now(UTC))
    assert rows(any_app, "SELECT status, status_at FROM events") == before
    assert rows(any_app, "SELECT count(*) FROM replays")[0][0] == 0


def test_a_single_replay_of_an_event_being_processed_is_refused_and_not_audited(any_app: Flask) -> None:
    assert deliver(any_app, "evt_busy") == 200
    set_row(any_app, "evt_busy", "processing", 1)
    with pytest.raises(ReplayError) as refused:
        replay_one(runtime(any_app), "stripe", "evt_busy", who="ops", reason=None)
    assert (refused.value.reason, refused.value.status) == ("in_progress", 409)
    with pytest.raises(ReplayError) as missing:
        replay_one(runtime(any_app), "stripe", "evt_nowhere", who="ops", reason=None)
    assert (missing.value.reason, missing.value.status) == ("not_found", 404)
    assert state(any_app, "evt_busy") == ("processing", 1)
    assert rows(any_app, "SELECT count(*) FROM replays")[0][0] == 0
    response = any_app.test_client().post(
        "/admin/api/events/stripe/evt_busy/replay", json={"reason": "x"}, headers=admin_headers()
    )
    assert (response.status_code, response.get_json()["error"]) == (409, "in_progress")


@pytest.mark.parametrize(
    ("status", "attempts", "job"),
    [
        ("received", 0, False),  # its job never reached Redis
        ("queued", 0, False),  # Redis lost its job
        ("processing", 1, True),  # abandoned by a killed worker (no transaction holds it)
    ],
)
def test_the_sweeper_requeues_each_stranded_state(any_app: Flask, status: str, attempts: int, job: bool) -> None:
    assert deliver(any_app, "evt_stranded") == 200
    set_row(any_app, "evt_stranded", status, attempts)
    if not job:
        drop_job(any_app, "evt_stranded")
    rt = runtime(any_app)
    assert sweep(rt) == 0  # younger than the sweep age: maybe still on its way
    assert sweep(rt, now=later()) == 1
    assert state(any_app, "evt_stranded") == ("queued", attempts)
    assert rt.queue.live([("stripe", "evt_stranded")]) == [True]
    assert sweep(rt, now=later()) == 0  # its job is live again


def test_the_sweeper_leaves_a_live_lease_alone(any_app: Flask) -> None:
    """A claimed row held by no lock (its job is calling the provider's API) is its job's while its
    lease is live, however old: the sweeper leaves it. A renewal under a stale token changes
    nothing; under the claim's it moves the lease (here: into the past), and then the row is the
    sweeper's: requeued, its late attempt's token stale."""
    assert deliver(any_app, "evt_leased") == 200
    rt = runtime(any_app)
    now = datetime.now(UTC)
    claimed = rt.store.claim("stripe", "evt_leased", now, now + LEASE)
    assert claimed is not None and claimed.attempts == 1
    drop_job(any_app, "evt_leased")
    assert sweep(rt, now=later()) == 0  # past the sweep age, but leased
    assert state(any_app, "evt_leased") == ("processing", 1)
    assert not rt.store.renew("stripe", "evt_leased", 2, now - timedelta(seconds=1))  # not its token
    assert sweep(rt, now=later()) == 0
    assert rt.store.renew("stripe", "evt_leased", 1, now - timedelta(seconds=1))  # its lease is over
    assert sweep(rt, now=later()) == 1
    assert state(any_app, "evt_leased") == ("queued", 1)
    assert rt.queue.live([("stripe", "evt_leased")]) == [True]
    assert not rt.store.renew("stripe", "evt_leased", 1, now + LEASE)  # no longer processing
    assert rt.store.process(claimed, work(rt, claimed), now) == "skipped"  # the late attempt
    assert not rt.store.fail("stripe", "evt_leased", 1, True, "Boom: late", "trace", now)
    assert state(any_app, "evt_leased") == ("queued", 1)


def test_a_claim_writes_its_lease(any_app: Flask) -> None:
    assert deliver(any_app, "evt_lease") == 200
    rt = runtime(any_app)
    now = datetime.now(UTC)

    def lease() -> datetime | None:
        with rt.sessions() as session:
            until = session.scalar(sa.select(Event.claimed_until))
        return None if until is None else aware(until)

    assert lease() is None
    assert rt.store.claim("stripe", "evt_lease", now, now + LEASE) is not None
    assert lease() == now + LEASE
    assert rt.store.renew("stripe", "evt_lease", 1, now + 2 * LEASE)
    assert lease() == now + 2 * LEASE


def test_the_sweeper_fails_an_abandoned_event_whose_attempts_are_spent(any_app: Flask) -> None:
    assert deliver(any_app, "evt_spent") == 200
    rt = runtime(any_app)
    set_row(any_app, "evt_spent", "processing", rt.settings.max_attempts)
    assert sweep(rt, now=later()) == 0  # nothing queued again: it would kill its worker again
    assert state(any_app, "evt_spent") == ("failed", rt.settings.max_attempts)
    error = rows(any_app, "SELECT last_error FROM events")[0][0]
    assert error.startswith("AbandonedJobError")


@contextlib.contextmanager
def held(rt: Runtime, event_id: str) -> Iterator[None]:
    """As a live job holds its row: PostgreSQL, its transaction's row lock; SQLite, the processing lock."""
    if rt.engine.dialect.name == "sqlite":
        with rt.processing() as got:
            assert got
            yield
        return
    with rt.engine.connect() as conn, conn.begin():
        conn.execute(sa.text("SELECT 1 FROM events WHERE event_id = :e FOR UPDATE"), {"e": event_id})
        yield


def test_the_sweeper_leaves_a_live_processing_row_alone(any_app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_store, "HOLD_TIMEOUT", 0.2)  # the tick gives up on a held lock soon
    assert deliver(any_app, "evt_live") == 200
    set_row(any_app, "evt_live", "processing", 1)
    rt = runtime(any_app)
    with held(rt, "evt_live"):
        assert sweep(rt, now=later()) == 0
    assert state(any_app, "evt_live") == ("processing", 1)


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
    first = rt.store.claim("stripe", "evt_twice", now, now + LEASE)
    second = rt.store.claim("stripe", "evt_twice", now, now + LEASE)
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
    assert rt.store.claim("stripe", "evt_twice", now, now + LEASE) is None  # processed: never claimed again


# Three versions of one object, and a duplicate: a distinct event carrying the oldest version.
VERSIONS = [("a", 1700000001), ("b", 1700000002), ("c", 1700000003), ("dup", 1700000001)]


def test_the_newest_version_wins_in_every_order(any_app: Flask) -> None:
    """Every order of the versions (each event processed twice, the repeat a no-op): the stored
    state is the newest's, written by the newest event."""
    runtime(any_app)
    for n, order in enumerate(itertools.permutations(VERSIONS)):
        obj = f"pi_order_{n}"
        for name, created in order:
            body = stripe_event(
                f"evt_{n}_{name}", created=created, obj={"id": obj, "object": "payment_intent", "status": name}
            )
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
    claimed = rt.store.claim("stripe", "evt_fails", datetime.now(UTC), datetime.now(UTC) + LEASE)
    assert claimed is not None
    assert rt.store.fail("stripe", "evt_fails", claimed.attempts, last_try, "Boom: down", "trace", datetime.now(UTC))
    assert rows(any_app, "SELECT status, attempts, last_error FROM events") == [
        ("failed" if last_try else "queued", 1, "Boom: down")
    ]
    assert rows(any_app, "SELECT number, status, error FROM attempts") == [(1, "error", "Boom: down")]


def test_a_dismissal_under_the_claim_ignores_the_event_with_its_reason_and_counts_it(any_app: Flask) -> None:
    """``dismiss`` (a nudge naming an object its provider does not have): ``MARK`` to ``ignored``
    with the reason as last error, its attempt's row and one rejection counted; a superseded claim's
    dismissal changes nothing."""
    deliver_stripe(any_app, stripe_event("evt_unknown"))
    rt = runtime(any_app)
    first = rt.store.claim("stripe", "evt_unknown", datetime.now(UTC), datetime.now(UTC) + LEASE)
    second = rt.store.claim("stripe", "evt_unknown", datetime.now(UTC), datetime.now(UTC) + LEASE)
    assert first is not None and second is not None
    assert not rt.store.dismiss("stripe", "evt_unknown", first.attempts, Reason.UNKNOWN_OBJECT, datetime.now(UTC))
    assert rows(any_app, "SELECT status, last_error FROM events") == [("processing", None)]
    assert rows(any_app, "SELECT count(*) FROM rejection_counts") == [(0,)]
    assert rt.store.dismiss("stripe", "evt_unknown", second.attempts, Reason.UNKNOWN_OBJECT, datetime.now(UTC))
    [(status, attempts, error, processed_at)] = rows(
        any_app, "SELECT status, attempts, last_error, processed_at FROM events"
    )
    assert (status, attempts, error) == ("ignored", 2, "unknown_object") and processed_at is not None
    assert rows(any_app, "SELECT number, status, error FROM attempts") == [(2, "ignored", "unknown_object")]
    assert rows(any_app, "SELECT endpoint, reason, count FROM rejection_counts") == [("stripe", "unknown_object", 1)]
    assert not rt.store.dismiss("stripe", "evt_unknown", second.attempts, Reason.UNKNOWN_OBJECT, datetime.now(UTC))
    assert rows(any_app, "SELECT count FROM rejection_counts") == [(1,)]  # a mark happens once


def test_an_event_abandoned_by_the_watchdog_after_its_last_attempt_is_failed(any_app: Flask) -> None:
    """The watchdog gives up on a job stuck past its timeout: on SQLite its attempt is recorded
    (failed: it was the last) under its token; on PostgreSQL the stuck transaction holds the row,
    so nothing is recorded and the thread settles it when its call returns."""
    deliver_stripe(any_app, stripe_event("evt_stuck"))
    rt = runtime(any_app)
    claimed = rt.store.claim("stripe", "evt_stuck", datetime.now(UTC), datetime.now(UTC) + LEASE)
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
