"""``JobQueue.enqueue_many`` derives each job's hash from one job RQ built for the queue (the
fields every job shares are sent once per batch): every job must read back exactly as RQ's own
build of it would (what a worker runs, and its retry policy)."""

from __future__ import annotations

import json

import pytest
from rq.job import Job

from webhooks.configuration import settings as config
from webhooks.queue import JOB, JobQueue, job_id

EVENTS = [("stripe", "evt_1"), ("stripe", "evt_" + "x" * 200), ("github", "dlv\u00e9'\"\\"), ("stripe", "evt_2")]


def fields(queue: JobQueue, jid: str) -> dict[bytes, bytes]:
    return dict(queue.connection.hgetall(Job.key_for(jid)))


def rqs_own(job: Job) -> dict[bytes, bytes]:
    """The hash RQ's own enqueue writes for ``job``, as Redis stores it (its ``to_dict`` without the
    None values; that this is what RQ writes is pinned by tests/worker/test_rq_contract.py)."""
    return {
        k.encode(): v if isinstance(v, bytes) else (v if isinstance(v, str) else str(v)).encode()
        for k, v in job.to_dict().items()
        if v is not None
    }


@pytest.mark.parametrize("attempts", ["5", "1"])  # with and without RQ's retry fields
def test_every_job_of_a_batch_reads_back_as_rqs_own_build(attempts: str) -> None:
    settings = config.load({"WEBHOOKS_MAX_ATTEMPTS": attempts})  # embedded: fakeredis
    queue, reference = JobQueue(settings), JobQueue(settings)
    assert queue.enqueue_many(EVENTS[:1]) == 1  # a second batch reuses what the first built
    queue.connection.flushdb()
    assert queue.enqueue_many(EVENTS) == len(EVENTS)
    assert [j.decode() for j in queue.connection.lrange(queue.queue.key, 0, -1)] == [job_id(*e) for e in EVENTS]
    for endpoint, event_id in EVENTS:
        jid = job_id(endpoint, event_id)
        job = Job.fetch(jid, connection=queue.connection)
        own = reference.build(endpoint, event_id)
        expected = rqs_own(own)
        got = fields(queue, jid)
        assert set(got) == set(expected)
        for key in set(got) - {b"created_at", b"enqueued_at", b"retry_intervals"}:
            assert got[key] == expected[key], key
        assert (job.func_name, job.args, job.kwargs) == (JOB, (endpoint, event_id), {})
        assert (job.description, job.retries_left, job.timeout) == (own.description, own.retries_left, own.timeout)
        assert (job.result_ttl, job.failure_ttl, job.origin, job.get_status()) == (
            500,
            7 * 24 * 3600,
            "default",
            "queued",
        )
        if attempts == "1":
            assert b"retry_intervals" not in got and job.retries_left is None
            continue
        intervals = json.loads(got[b"retry_intervals"])
        assert len(intervals) == settings.max_attempts - 1
        for i, value in enumerate(intervals):
            ceiling = min(settings.retry_max_seconds, settings.retry_base_seconds * 2**i)
            assert ceiling / 2 - 1 <= value <= ceiling


def test_a_batch_queues_only_the_events_without_a_job() -> None:
    queue = JobQueue(config.load({}))
    assert queue.enqueue_many(EVENTS[:2]) == 2
    assert queue.enqueue_many(EVENTS) == 2
    assert queue.connection.llen(queue.queue.key) == len(EVENTS)
