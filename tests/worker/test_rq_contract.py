"""What webhooks relies on in RQ beyond its documented API, pinned for the supported range
(pyproject.toml's ``rq`` pin): a version of RQ that changes any of it fails here.

- The batch enqueue (``JobQueue.enqueue_many``, one Lua script per batch) writes the job hash
  RQ's own ``Queue.enqueue(..., unique=True)`` writes, byte for byte but the timestamps, with the
  same TTL, queue entry and ``rq:queues`` member, and leaves an existing job alone as RQ's unique
  enqueue does; an RQ worker runs what it queued.
- The work loop's stop flags: ``request_stop`` (RQ's SIGTERM handler) leaves
  ``_shutdown_requested_date`` (idle) or ``_stop_requested`` (busy), which ``ScopedWorker.stopping``
  reads; setting ``_stop_requested`` (``ScopedWorker.ask_to_stop``, the embedded watchdog) ends the
  loop before the next job.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Iterator

import fakeredis
import pytest
import redis
from rq import Queue, Retry, SimpleWorker
from rq.exceptions import DuplicateJobError
from rq.job import Job
from rq.worker import WorkerStatus

import webhooks.queue as queue_module
from webhooks.configuration import settings as config
from webhooks.queue import JobQueue, job_id, retry_intervals
from webhooks.worker.burst import BurstWorker
from webhooks.worker.loop import PromptWorker, ScopedWorker

EVENTS = [("stripe", "evt_1"), ("stripe", "evt_" + "x" * 200), ("github", "dlv\u00e9'\"\\"), ("stripe", "evt_2")]
RAN: list[tuple[str, str]] = []


def record(endpoint: str, event_id: str) -> None:
    """A stand-in for the processing job (same arguments)."""
    RAN.append((endpoint, event_id))


@pytest.fixture()
def signals() -> Iterator[None]:
    """``request_stop`` installs RQ's force-stop handlers: put the test runner's back."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def _rqs_own(settings: config.Settings, seed: int) -> fakeredis.FakeRedis:
    """A Redis where RQ's public unique enqueue queued ``EVENTS`` as webhooks describes its jobs."""
    connection = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    queue, rng = Queue(settings.queue_name, connection=connection), random.Random(seed)
    retries = settings.max_attempts - 1
    for endpoint, event_id in EVENTS:
        intervals = retry_intervals(settings, rng)
        queue.enqueue(
            queue_module.JOB,
            args=(endpoint, event_id),
            job_id=job_id(endpoint, event_id),
            retry=Retry(max=retries, interval=intervals) if retries else None,
            job_timeout=settings.job_timeout,
            result_ttl=500,
            failure_ttl=7 * 24 * 3600,
            unique=True,
        )
    with pytest.raises(DuplicateJobError):  # RQ's unique enqueue leaves an existing job alone
        queue.enqueue(queue_module.JOB, args=EVENTS[0], job_id=job_id(*EVENTS[0]), unique=True)
    return connection


@pytest.mark.parametrize("attempts", ["5", "1"])  # with and without RQ's retry fields
def test_a_batch_writes_the_hash_rqs_unique_enqueue_writes(attempts: str, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = config.load({"WEBHOOKS_MAX_ATTEMPTS": attempts, "WEBHOOKS_JOB_TIMEOUT": "45"})  # embedded: fakeredis
    ours = JobQueue(settings)
    ours._shape()  # built once per queue (it draws intervals of its own)
    monkeypatch.setattr(queue_module, "_JITTER", random.Random(7))
    assert ours.enqueue_many(EVENTS) == len(EVENTS)
    assert ours.enqueue_many(EVENTS[:1]) == 0  # an existing job is left alone
    theirs = _rqs_own(settings, 7)
    mine = ours.connection
    for endpoint, event_id in EVENTS:
        key = Job.key_for(job_id(endpoint, event_id))
        got, expected = mine.hgetall(key), theirs.hgetall(key)
        assert set(got) == set(expected)
        for stamp in (b"created_at", b"enqueued_at"):  # when, not what: both RQ's format
            assert len(got.pop(stamp)) == len(expected.pop(stamp))
        assert got == expected, (endpoint, event_id)
        assert mine.ttl(key) == theirs.ttl(key)
    queue_key = ours.queue.key
    assert mine.lrange(queue_key, 0, -1) == theirs.lrange(queue_key, 0, -1)
    assert mine.smembers(ours.queue.redis_queues_keys) == theirs.smembers(ours.queue.redis_queues_keys)


def test_an_rq_worker_runs_what_the_batch_queued(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queue_module, "JOB", f"{__name__}.record")
    RAN.clear()
    ours = JobQueue(config.load({}))
    assert ours.enqueue_many(EVENTS) == len(EVENTS)
    SimpleWorker([ours.queue], connection=ours.connection).work(burst=True)
    assert RAN == EVENTS
    assert all(Job.fetch(job_id(*e), connection=ours.connection).get_status() == "finished" for e in EVENTS)


def _worker() -> ScopedWorker:
    connection = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    return ScopedWorker([Queue("default", connection=connection)], connection=connection)


def test_rqs_stop_request_leaves_what_stopping_reads(signals: None) -> None:
    idle, busy = _worker(), _worker()
    assert not idle.stopping() and not busy.stopping()
    # idle: no StopRequested from the signal handler (it could land inside the blocking dequeue and
    # drop a job Redis had just moved); the request's date and the flag, read by the dequeue.
    idle.request_stop(signal.SIGTERM, None)
    assert idle._shutdown_requested_date is not None and idle._stop_requested and idle.stopping()
    busy.set_state(WorkerStatus.BUSY)
    busy.request_stop(signal.SIGTERM, None)  # busy: after the current job
    assert busy._stop_requested is True and busy.stopping()


def test_ask_to_stop_ends_the_loop_before_the_next_job() -> None:
    RAN.clear()
    worker = _worker()
    queue = worker.queues[0]
    queue.enqueue(record, "stripe", "evt_left")
    worker.scope = lambda: _Nothing()
    worker.ask_to_stop()
    worker.work(burst=True)
    assert RAN == [] and queue.count == 1
    worker = ScopedWorker([queue], connection=queue.connection)
    worker.scope = lambda: _Nothing()
    worker.work(burst=True)
    assert RAN == [("stripe", "evt_left")]


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


# -- a stop never waits on RQ's command thread (the restarts issue: one stop in 8-15 took 60 s) ----

STOP_BOUND = 5.0  # seconds: a platform kills at 30; the bound a stop must keep


def _teardown_within(worker: PromptWorker, bound: float) -> float:
    """RQ's own teardown of ``worker`` on a thread of the test's, bounded: how long it took."""
    started = time.monotonic()
    done = threading.Thread(target=worker.teardown, daemon=True)
    done.start()
    done.join(bound)
    assert not done.is_alive(), f"RQ's teardown did not return within {bound} s"
    return time.monotonic() - started


@pytest.mark.redis
def test_a_stop_racing_the_command_thread_is_bounded(redis_url: str) -> None:
    """The race made on purpose: the command thread reads the UNSUBSCRIBE reply and loops back
    (its flag still set) before ``stop()`` clears the flag, so it waits for a subscription. RQ's
    60 s made that wait a minute; ours is bounded by ``PromptWorker.command_wait``."""
    connection = redis.Redis.from_url(redis_url)
    worker = PromptWorker([Queue("default", connection=connection)], connection=connection)
    worker.register_birth()
    worker.subscribe()
    pubsub = worker.pubsub
    assert pubsub is not None
    looped_back = threading.Event()
    real_get, real_unsubscribe = pubsub.get_message, pubsub.unsubscribe

    def get_message(*args: object, **kwargs: object) -> object:
        if not pubsub.subscribed:  # the thread came back with no subscription: the race's point
            looped_back.set()
        return real_get(*args, **kwargs)

    def unsubscribe(*args: object) -> object:
        result = real_unsubscribe(*args)
        assert looped_back.wait(30), "the command thread never looped back unsubscribed"
        return result  # only now does RQ's teardown call stop(): the thread is already waiting

    pubsub.get_message = get_message  # type: ignore[method-assign]
    pubsub.unsubscribe = unsubscribe  # type: ignore[method-assign]
    took = _teardown_within(worker, STOP_BOUND)
    assert took < STOP_BOUND
    connection.close()


@pytest.mark.redis
def test_thirty_stops_of_a_real_worker_each_within_the_bound(redis_url: str) -> None:
    """The contract on a real Redis: a worker's birth, command subscription and stop, 30 times
    (the race came 1 in 8-15), none over the bound, all leaving the worker registry empty."""
    connection = redis.Redis.from_url(redis_url)
    queue = Queue("default", connection=connection)
    longest = 0.0
    for _ in range(30):
        worker = PromptWorker([queue], connection=connection)
        worker.register_birth()
        worker.subscribe()
        assert worker.pubsub_thread is not None and worker.pubsub_thread.is_alive()
        longest = max(longest, _teardown_within(worker, STOP_BOUND))
        assert not worker.pubsub_thread.is_alive() or longest < STOP_BOUND
    assert longest < STOP_BOUND
    from rq import Worker as RQWorker

    assert RQWorker.all(connection=connection) == []
    connection.close()


@pytest.mark.redis
def test_an_idle_worker_asked_to_stop_ends_its_dequeue_and_drops_no_job(redis_url: str) -> None:
    """The rolling restart found events that waited a minute for the sweeper: RQ raised
    ``StopRequested`` inside the blocking dequeue, after Redis had moved a job to its intermediate
    list. The stop now only sets the flag; the dequeue looks at it every ``STOP_POLL`` seconds and
    the loop ends, a job queued at that moment staying in the queue for the next worker."""

    connection = redis.Redis.from_url(redis_url)
    queue = Queue("stopping", connection=connection)
    worker = PromptWorker([queue], connection=connection)
    timer = threading.Timer(0.5, worker._shutdown)  # what SIGTERM's handler does, when idle
    timer.start()
    started = time.monotonic()
    worker.work(burst=False)
    took = time.monotonic() - started
    assert took < STOP_BOUND, took
    assert worker._stop_requested
    job = queue.enqueue(record, "stripe", "evt_after_stop")
    assert queue.job_ids == [job.id]  # nothing took it: the next worker will
    assert connection.llen(queue.intermediate_queue_key) == 0
    connection.close()


LISTENING: list[int] = []


def count_listeners(url: str, channel_pattern: str) -> None:
    """A job that records how many of RQ's worker command channels have a subscriber now."""
    connection = redis.Redis.from_url(url)
    LISTENING.append(len(connection.pubsub_channels(channel_pattern)))
    connection.close()


@pytest.mark.redis
@pytest.mark.parametrize(("worker_class", "listening"), [(PromptWorker, 1), (BurstWorker, 0)])
def test_a_burst_listens_for_no_command(redis_url: str, worker_class: type[PromptWorker], listening: int) -> None:
    """``BurstWorker`` (the suite's ``drain``, ``webhooks.testing``'s ``run()``) runs the queue to its
    end with no command channel, so its end waits for no command thread; ``PromptWorker``, the
    control, subscribes to its channel as RQ does. Both leave no worker registered."""
    from rq import Worker as RQWorker

    LISTENING.clear()
    connection = redis.Redis.from_url(redis_url)
    queue = Queue("burst", connection=connection)
    queue.enqueue(count_listeners, redis_url, "rq:pubsub:*")
    worker = worker_class([queue], connection=connection)
    worker.work(burst=True)
    assert [listening] == LISTENING
    assert worker.pubsub_thread is None or not worker.pubsub_thread.is_alive()
    assert queue.count == 0 and RQWorker.all(connection=connection) == []
    connection.close()
