"""The sweeper, in one home: ``processing`` rows abandoned by a killed worker (requeued, or failed
once their attempts are spent; a live one left alone), jobs taken or started by a worker killed
before its claim, ``received`` rows that never reached Redis and ``queued`` rows whose job Redis
lost. Also the claim token and per-object serialization that make recovering a row harmless (two
events of one object never run at the same time)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask
from rq.job import JobStatus

from tests.conftest import base_config, drain, free_port, make_app, rows, runtime, stripe_event, stripe_headers
from webhooks import HandlerEvent, on
from webhooks.jobs.process import process_event
from webhooks.queue import job_id
from webhooks.worker.sweeper import sweep

ACTIVE: dict[str, int] = {}
OVERLAPS: list[str] = []
PEAK: list[int] = []
AWAIT_OVERLAP = threading.Event()  # set: each handler waits until two handlers ran at once
TOGETHER = threading.Event()  # two handlers were inside at the same moment
_lock = threading.Lock()


@on("stripe", "test.overlap")
def slow(event: HandlerEvent, state: Any) -> None:
    """Counts how many events of one object are inside a handler at once."""
    key = f"{event.object_type}/{event.object_id}"
    with _lock:
        ACTIVE[key] = ACTIVE.get(key, 0) + 1
        if ACTIVE[key] > 1:
            OVERLAPS.append(key)
        PEAK.append(sum(ACTIVE.values()))
        if PEAK[-1] > 1:
            TOGETHER.set()
    if AWAIT_OVERLAP.is_set():
        # The other thread's event, of another object, enters meanwhile; if it cannot, stop
        # waiting after one deadline so the assertion fails fast.
        if not TOGETHER.wait(timeout=30):
            AWAIT_OVERLAP.clear()
    else:
        time.sleep(0.05)  # a window in which a second event of the same object would show up
    with _lock:
        ACTIVE[key] -= 1


@pytest.fixture
def pg_app(pg_url: str, redis_url: str) -> Flask:
    # Only handlers of the configured modules run: this module's `slow` too.
    return make_app(
        base_config(pg_url, REDIS_URL=redis_url, WEBHOOKS_HANDLERS="tests.sample_handlers,tests.worker.test_sweeper")
    )


def post(
    app: Flask, event_id: str, type_: str = "payment_intent.succeeded", obj_id: str = "pi_1", created: int = 1700000000
) -> None:
    body = stripe_event(event_id, type_, created, {"id": obj_id, "object": "payment_intent"})
    assert app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200


def later() -> datetime:
    """Past ``WEBHOOKS_SWEEP_AGE`` from now: read the clock when the test needs it, never at import."""
    return datetime.now(UTC) + timedelta(minutes=5)


def strand(app: Flask, event_id: str, attempts: int = 1) -> None:
    """What a SIGKILL mid-job leaves: the row `processing`, its RQ job still `started`."""
    rt = runtime(app)
    job = rt.queue.queue.fetch_job(job_id("stripe", event_id))
    assert job is not None
    rt.queue.queue.remove(job)
    job.set_status(JobStatus.STARTED)
    with rt.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE events SET status = 'processing', attempts = :a WHERE event_id = :e"),
            {"a": attempts, "e": event_id},
        )


def test_abandoned_processing_row_is_requeued_and_processed_once(any_app: Flask) -> None:
    post(any_app, "evt_killed")
    strand(any_app, "evt_killed")
    rt = runtime(any_app)
    assert sweep(rt) == 0  # younger than WEBHOOKS_SWEEP_AGE: maybe still running
    assert sweep(rt, now=later()) == 1
    assert sweep(rt, now=later()) == 0  # queued again, with a live job
    drain(any_app)
    assert rows(any_app, "SELECT status, attempts FROM events") == [("processed", 2)]
    assert len(rows(any_app, "SELECT 1 FROM test_handler_calls")) == 1
    # One row per attempt: the abandoned one's written by the sweeper.
    assert rows(any_app, "SELECT number, status FROM attempts ORDER BY number") == [(1, "error"), (2, "processed")]


def test_abandoned_row_that_used_every_attempt_fails_instead_of_looping(any_app: Flask) -> None:
    post(any_app, "evt_poison")
    strand(any_app, "evt_poison", attempts=5)
    assert sweep(runtime(any_app), now=later()) == 0
    status, error = rows(any_app, "SELECT status, last_error FROM events")[0]
    assert status == "failed" and error.startswith("AbandonedJobError")


def test_processing_row_held_by_a_live_transaction_is_left_alone(pg_app: Flask) -> None:
    post(pg_app, "evt_busy")
    strand(pg_app, "evt_busy")
    rt = runtime(pg_app)
    with rt.engine.begin() as conn:  # a worker inside its processing transaction
        conn.execute(sa.text("SELECT 1 FROM events WHERE event_id = 'evt_busy' FOR UPDATE"))
        assert sweep(rt, now=later()) == 0
    assert sweep(rt, now=later()) == 1


def test_a_superseded_claim_does_not_process(any_app: Flask) -> None:
    """Job A claimed (attempt 1) and stalled; the sweeper gave the event to job B, which processed
    it. A's own transaction then finds its claim superseded and does nothing."""
    post(any_app, "evt_stall")
    strand(any_app, "evt_stall")
    rt = runtime(any_app)
    sweep(rt, now=later())
    drain(any_app)
    from webhooks.store import sqlite_worker as sqlite

    with rt.sessions() as session, session.begin():  # the claim's check, through the ORM
        assert sqlite.mine(session, "stripe", "evt_stall", 1) is None
    assert process_event("stripe", "evt_stall") == "skipped"
    assert len(rows(any_app, "SELECT 1 FROM test_handler_calls")) == 1


def run_concurrently(app: Flask, event_ids: list[str], threads: int = 2) -> None:
    rt = runtime(app)
    todo = list(event_ids)

    def work() -> None:
        rt.bind()
        while True:
            with _lock:
                if not todo:
                    return
                event_id = todo.pop(0)
            process_event("stripe", event_id)

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()


def test_two_events_of_one_object_never_overlap_on_postgres(pg_app: Flask) -> None:
    ACTIVE.clear()
    OVERLAPS.clear()
    PEAK.clear()
    AWAIT_OVERLAP.clear()
    TOGETHER.clear()
    ids = [f"evt_same_{n}" for n in range(8)]
    for n, event_id in enumerate(ids):
        post(pg_app, event_id, "test.overlap", "pi_same", 1700000000 + n)
    run_concurrently(pg_app, ids)
    assert len(PEAK) == 8 and OVERLAPS == []  # the handler ran for each, never two at once
    assert rows(pg_app, "SELECT version FROM objects") == [((1700000000 + 7) * 10000 + 1,)]
    # The same harness does see overlap for different objects: the test can detect it. Each
    # handler waits (with a deadline) for the other thread rather than hoping a sleep is long enough.
    PEAK.clear()
    AWAIT_OVERLAP.set()
    ids = [f"evt_other_{n}" for n in range(8)]
    for n, event_id in enumerate(ids):
        post(pg_app, event_id, "test.overlap", f"pi_{n}", 1700000000 + n)
    run_concurrently(pg_app, ids)
    assert max(PEAK) == 2
    assert rows(pg_app, "SELECT count(*) FROM events WHERE status = 'processed'") == [(16,)]


def test_a_job_taken_by_a_worker_killed_before_its_claim_is_requeued(any_app: Flask) -> None:
    """A worker takes a job by moving its id to the queue's intermediate list and marks it started
    only afterwards: one SIGKILLed in between leaves the row `queued` and the job `queued` in no
    queue. The sweeper must requeue it, not leave it to RQ's maintenance (every 10 minutes, and
    only after the job's timeout). Seen in the storm under CPU load: one event stranded > 10 min."""
    from rq import Queue

    post(any_app, "evt_taken")
    rt = runtime(any_app)
    queue = rt.queue.queue
    assert Queue.lmove(queue.connection, queue.key, timeout=None) is not None  # taken; then SIGKILL
    assert queue.count == 0
    assert sweep(rt, now=later()) == 1
    drain(any_app)
    assert rows(any_app, "SELECT status, attempts FROM events") == [("processed", 1)]


def test_a_job_started_by_a_worker_killed_before_its_claim_is_requeued(any_app: Flask) -> None:
    """The next step of the same race: RQ marked the job `started`, then the worker died before
    `process_event` claimed the row. The row is still `queued` with no attempt, past the sweep age:
    no live worker is that slow to claim, so the sweeper requeues it instead of trusting `started`."""
    from rq import Queue
    from rq.job import JobStatus

    post(any_app, "evt_started")
    rt = runtime(any_app)
    queue = rt.queue.queue
    taken = Queue.lmove(queue.connection, queue.key, timeout=None)
    assert taken is not None
    job = queue.fetch_job(taken[1].decode() if isinstance(taken[1], bytes) else taken[1])
    assert job is not None
    job.set_status(JobStatus.STARTED)  # then SIGKILL, before the claim
    assert sweep(rt, now=later()) == 1
    drain(any_app)
    assert rows(any_app, "SELECT status, attempts FROM events") == [("processed", 1)]


# ===== rows that never reached Redis, or whose job Redis lost =====


@pytest.fixture
def redis_down_app(sqlite_url: str) -> Flask:
    return make_app(base_config(sqlite_url, REDIS_URL=f"redis://127.0.0.1:{free_port()}/0"))


def test_redis_down_still_acknowledges_and_the_sweeper_recovers(redis_down_app: Flask, sqlite_url: str) -> None:
    body = stripe_event("evt_noredis")
    response = redis_down_app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body))
    assert response.status_code == 200
    assert rows(redis_down_app, "SELECT status FROM events") == [("received",)]
    # Redis is back (here: the embedded queue on the same database); the sweeper re-enqueues.
    healed = make_app(base_config(sqlite_url))
    rt = runtime(healed)
    assert sweep(rt) == 0  # younger than the threshold: maybe still on its way
    assert sweep(rt, now=datetime.now(UTC) + timedelta(minutes=5)) == 1
    drain(healed)
    assert rows(healed, "SELECT status FROM events") == [("processed",)]


def test_sweeper_requeues_queued_rows_whose_job_vanished(app: Flask) -> None:
    body = stripe_event("evt_flushed")
    app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body))
    rt = runtime(app)
    rt.queue.connection.flushall()  # Redis lost everything
    later = datetime.now(UTC) + timedelta(minutes=5)
    assert sweep(rt, now=later) == 1
    assert sweep(rt, now=later) == 0  # its job is live again: nothing to do
    drain(app)
    assert rows(app, "SELECT status FROM events") == [("processed",)]


def test_a_stranded_row_behind_a_backlog_of_live_jobs_is_found(app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a backlog most stale `queued` rows have live jobs; the sweeper walks past them all
    (a page per Redis round trip) to the one whose job is gone."""
    from webhooks.store import sql

    monkeypatch.setattr(sql, "SWEEP_PAGE", 4)  # several pages with a few rows
    client = app.test_client()
    for i in range(10):
        body = stripe_event(f"evt_backlog_{i}", created=1700000000 + i)
        client.post("/webhooks/stripe", data=body, headers=stripe_headers(body))
    rt = runtime(app)
    from rq.job import Job

    from webhooks.queue import job_id

    Job.fetch(job_id("stripe", "evt_backlog_9"), connection=rt.queue.connection).delete()  # the newest: last page
    assert sweep(rt, now=datetime.now(UTC) + timedelta(minutes=5)) == 1
    assert rt.queue.live([("stripe", f"evt_backlog_{i}") for i in range(10)]) == [True] * 10
