"""Group commit (``webhooks/batch.py``) and the one-round-trip enqueue (``JobQueue.enqueue_many``).

Batches are formed deterministically: the test holds the committer "busy" (as if a batch were
being written), lets three deliveries queue up behind it, then releases it, so the three are
written as one batch. A failing batch-mate (a row PostgreSQL refuses, or the connection killed
just before COMMIT) must cost the others nothing but a second try.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask
from rq.job import Job, JobStatus
from sqlalchemy.exc import SQLAlchemyError

from tests.conftest import base_config, make_app, rows, runtime, stripe_event, stripe_headers, wait_until
from webhooks.providers.base import Request
from webhooks.queue import job_id
from webhooks.receiver import batch
from webhooks.receiver.receive import verify
from webhooks.receiver.rows import event_rows
from webhooks.worker.loop import PromptWorker


@pytest.fixture
def pg_app(pg_url: str, redis_url: str) -> Flask:
    return make_app(base_config(pg_url, REDIS_URL=redis_url))


def pending(app: Flask, event_id: str) -> batch.Pending:
    """A verified Stripe delivery of ``event_id``, ready to store (signed by the SDK oracle)."""
    rt = runtime(app)
    endpoint = rt.settings.endpoints["stripe"]
    body = stripe_event(event_id)
    headers = {k.lower(): v for k, v in stripe_headers(body).items()}
    verified = verify(endpoint, Request(headers, body, "http://test/webhooks/stripe"), time.time())
    return batch.Pending(endpoint, verified, event_rows(endpoint, verified, body, headers, datetime.now(UTC)))


def store_as_one_batch(
    app: Flask,
    items: list[batch.Pending],
    committer: batch.GroupCommit | None = None,
    before_first: Callable[[], None] | None = None,
) -> tuple[list[Any], list[int]]:
    """Store ``items`` from one thread each, all in the same first batch; returns each item's
    outcome (the Pending, or the exception raised) and the sizes of the batches written.
    ``before_first`` runs just before the first batch is written."""
    committer = committer or batch.GroupCommit(runtime(app))
    sizes: list[int] = []
    commit = committer._commit

    def spy(group: list[batch.Pending]) -> None:
        if not sizes and before_first is not None:
            before_first()
        sizes.append(len(group))
        commit(group)

    committer._commit = spy  # type: ignore[method-assign]
    outcomes: list[Any] = [None] * len(items)

    def deliver(position: int) -> None:
        runtime(app)
        try:
            outcomes[position] = committer.store(items[position])
        except Exception as exc:
            outcomes[position] = exc

    # As if a batch were being written: the others queue behind the first, which is then handed
    # the lead, and takes them all into its batch.
    with committer._lock:
        committer._writing = True
    threads = [threading.Thread(target=deliver, args=(i,)) for i in range(len(items))]
    for thread in threads:
        thread.start()
    wait_until(lambda: len(committer._pending) == len(items))
    with committer._lock:
        first = committer._pending.pop(0)
    first.wake.set()
    for thread in threads:
        thread.join(60)
    return outcomes, sizes


def queued_jobs(app: Flask) -> set[str]:
    rt = runtime(app)
    return {jid.decode() for jid in rt.queue.connection.lrange(rt.queue.queue.key, 0, -1)}


def test_concurrent_deliveries_share_one_batch(pg_app: Flask) -> None:
    items = [pending(pg_app, f"evt_gc_{i}") for i in range(3)] + [pending(pg_app, "evt_gc_0")]
    outcomes, sizes = store_as_one_batch(pg_app, items)
    assert sizes == [4]
    # The id delivered twice in one batch is new for one delivery only; both are answered.
    assert [len(o.new) for o in outcomes[1:3]] == [1, 1] and sorted([outcomes[0].new, outcomes[3].new]) == [
        [],
        ["evt_gc_0"],
    ]
    assert rows(pg_app, "SELECT count(*) FROM events")[0][0] == 3
    assert queued_jobs(pg_app) == {job_id("stripe", f"evt_gc_{i}") for i in range(3)}


def test_a_batch_mate_with_a_refused_row_fails_alone(pg_app: Flask) -> None:
    items = [pending(pg_app, "evt_good_1"), pending(pg_app, "evt_bad"), pending(pg_app, "evt_good_2")]
    items[1].rows[0]["event_type"] = "x" * 300  # over varchar(255): PostgreSQL refuses the statement
    outcomes, sizes = store_as_one_batch(pg_app, items)
    assert sizes == [3, 1, 1, 1]  # the batch failed, then each delivery was stored alone
    assert isinstance(outcomes[1], SQLAlchemyError)  # answered 503: the provider retries
    assert outcomes[0].new == ["evt_good_1"] and outcomes[2].new == ["evt_good_2"]
    stored = {r[0] for r in rows(pg_app, "SELECT event_id FROM events WHERE status = 'queued'")}
    assert stored == {"evt_good_1", "evt_good_2"}
    assert queued_jobs(pg_app) == {job_id("stripe", "evt_good_1"), job_id("stripe", "evt_good_2")}


def test_a_connection_dropped_under_a_batch_loses_nothing_acknowledged(pg_app: Flask, pg_url: str) -> None:
    """The batch's connection dies as the batch is written (PostgreSQL ends its session): every
    delivery is still stored once, answered, and queued."""
    committer = batch.GroupCommit(runtime(pg_app))
    assert committer.store(pending(pg_app, "evt_warm")).new == ["evt_warm"]  # the batches' connection
    admin = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")
    killed: list[int] = []

    def kill_the_batch_connection() -> None:
        pid = committer._inserts._raw.driver_connection.info.backend_pid  # type: ignore[union-attr]
        with admin.connect() as other:
            assert other.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar()
        killed.append(pid)

    try:
        items = [pending(pg_app, f"evt_drop_{i}") for i in range(3)]
        outcomes, sizes = store_as_one_batch(pg_app, items, committer, kill_the_batch_connection)
    finally:
        admin.dispose()
    assert killed and sizes == [3, 1, 1, 1]  # the batch failed, then each delivery was stored alone
    assert all(isinstance(o, batch.Pending) and len(o.new) == 1 for o in outcomes)
    assert rows(pg_app, "SELECT count(*) FROM events")[0][0] == 4
    assert queued_jobs(pg_app) == {job_id("stripe", f"evt_drop_{i}") for i in range(3)} | {job_id("stripe", "evt_warm")}


def test_enqueue_many_writes_jobs_rq_runs_and_refuses_existing_ids(pg_app: Flask) -> None:
    client = pg_app.test_client()
    for i in range(3):
        body = stripe_event(f"evt_rq_{i}")
        assert client.post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200
    rt = runtime(pg_app)
    events = [("stripe", f"evt_rq_{i}") for i in range(3)]
    assert rt.queue.enqueue_many(events) == 0  # every id has its job: a duplicate never queues work
    assert len(queued_jobs(pg_app)) == 3
    job = Job.fetch(job_id("stripe", "evt_rq_0"), connection=rt.queue.connection)
    assert job.get_status() == JobStatus.QUEUED and tuple(job.args) == ("stripe", "evt_rq_0")
    assert job.retries_left == rt.settings.max_attempts - 1 and job.timeout == rt.settings.job_timeout
    # RQ's own worker; PromptWorker only bounds its stop (a plain SimpleWorker's stop waits up to 60 s
    # on its command thread, one stop in 8 to 15, against a real Redis: webhooks/worker/loop.py).
    PromptWorker([rt.queue.queue], connection=rt.queue.connection).work(burst=True)
    statuses = {r[0] for r in rows(pg_app, "SELECT status FROM events")}
    assert statuses == {"processed"}
    assert Job.fetch(job_id("stripe", "evt_rq_2"), connection=rt.queue.connection).get_status() == JobStatus.FINISHED


def test_a_failed_replay_check_after_the_commit_costs_nothing_stored(
    pg_app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL the batch commits before a delivery that stored nothing has its replay key
    checked: if that check fails, the batch is still answered as committed (the new event queued
    at once, never stored again as a duplicate), and only the replay's count is lost."""
    import dataclasses

    first = pending(pg_app, "evt_seen")
    assert batch.GroupCommit(runtime(pg_app)).store(first).new == ["evt_seen"]
    again = pending(pg_app, "evt_seen")
    again.verified = dataclasses.replace(again.verified, replay_key="a" * 64)  # as a replay-key scheme's

    def broken(*args: object) -> bool:
        raise sa.exc.OperationalError("SELECT", {}, Exception("connection lost"))

    monkeypatch.setattr(batch, "replayed", broken)
    outcomes, sizes = store_as_one_batch(pg_app, [pending(pg_app, "evt_fresh"), again])
    assert sizes == [2]  # not stored again one by one
    assert outcomes[0].new == ["evt_fresh"] and (outcomes[1].new, outcomes[1].replayed) == ([], False)
    assert job_id("stripe", "evt_fresh") in queued_jobs(pg_app)


def test_batch_mates_are_answered_before_the_leader_queues_their_jobs(pg_app: Flask) -> None:
    """Once committed, the batch-mates are answered and the lead handed on; the leader queues the
    batch's jobs after (while the next batch commits), and only then answers itself."""
    committer = batch.GroupCommit(runtime(pg_app))
    enqueue, entered, release = committer._enqueue, threading.Event(), threading.Event()

    def held(stored: list[batch.Pending]) -> None:
        entered.set()
        assert release.wait(60)
        enqueue(stored)

    committer._enqueue = held  # type: ignore[method-assign]
    items = [pending(pg_app, f"evt_lead_{i}") for i in range(3)]
    outcomes: dict[int, Any] = {}

    def deliver(position: int) -> None:
        outcomes[position] = committer.store(items[position])

    with committer._lock:
        committer._writing = True  # as if a batch were being written: all three queue up
    threads = [threading.Thread(target=deliver, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    wait_until(lambda: len(committer._pending) == 3)
    with committer._lock:
        leader = committer._pending.pop(0)
    leader.wake.set()
    assert entered.wait(60)
    wait_until(lambda: len(outcomes) == 2)  # the two batch-mates, answered while the leader waits
    assert leader not in outcomes.values() and all(o.new for o in outcomes.values())
    assert rows(pg_app, "SELECT count(*) FROM events") == [(3,)]
    assert queued_jobs(pg_app) == set()
    assert not committer._writing  # the lead was handed on: a next batch need not wait
    release.set()
    for thread in threads:
        thread.join(60)
    assert len(outcomes) == 3
    assert queued_jobs(pg_app) == {job_id("stripe", f"evt_lead_{i}") for i in range(3)}
