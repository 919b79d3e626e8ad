"""The work queue: RQ on Redis, or on an in-process fakeredis (the embedded default).

The database is the source of truth; Redis only carries work. ``enqueue`` is idempotent (the job
id is derived from ``(endpoint, event_id)`` and enqueued with ``unique=True``), so the receiver,
the sweeper and a replay may all call it for the same event at any time.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
import zlib
from collections.abc import Callable, Mapping
from datetime import timedelta
from enum import Enum
from typing import Any, Protocol

import redis
from rq import Queue, Retry
from rq.exceptions import InvalidJobOperation, NoSuchJobError
from rq.job import Job, JobStatus
from rq.utils import get_call_string, now, utcformat

from webhooks import providers
from webhooks.configuration.settings import Settings
from webhooks.urls import sentinels

JOB = "webhooks.jobs.process.process_event"  # by dotted path: the web side never imports jobs
# The queue beside ``WEBHOOKS_QUEUE`` (``<name>-lanes``) takes the jobs of endpoints whose events
# call their provider's API (``Provider.calls_out``): our workers take it only when the main queue
# is empty (RQ dequeues its queues in order), so a flood on such an endpoint never queues ahead
# of another endpoint's events; its jobs hand the work to the endpoint's lane (``webhooks.lanes``).
LANES = "-lanes"
LIVE = (JobStatus.QUEUED, JobStatus.STARTED, JobStatus.SCHEDULED, JobStatus.DEFERRED)


# KEYS: the queue, RQ's set of queues, then one job hash per job. ARGV: the TTL (-1: none); the
# job's shape as JSON, [fields and values every job shares, names of the fields each job has of
# its own] (the same for every call of a process: Redis decodes it, the client sends one string);
# this call's timestamp; then per job its id and its own fields' values. A job whose hash exists
# is left alone (RQ's unique=True: queued, running or recently finished — the database decides
# the rest).
ENQUEUE_MANY = """
redis.call("SADD", KEYS[2], KEYS[1])
local ttl = tonumber(ARGV[1])
local shape = cjson.decode(ARGV[2])
local shared, own, stamp = shape[1], shape[2], ARGV[3]
local m, n = #own, #shared
local fields = {}
for i = 1, n do fields[2 * m + i] = shared[i] end
for i, name in ipairs({"created_at", stamp, "enqueued_at", stamp}) do fields[2 * m + n + i] = name end
local queued, a = 0, 4
for k = 3, #KEYS do
    if redis.call("EXISTS", KEYS[k]) == 0 then
        for i = 1, m do
            fields[2 * i - 1] = own[i]
            fields[2 * i] = ARGV[a + i]
        end
        redis.call("HSET", KEYS[k], unpack(fields))
        if ttl > 0 then redis.call("EXPIRE", KEYS[k], ttl) end
        redis.call("RPUSH", KEYS[1], ARGV[a])
        queued = queued + 1
    end
    a = a + 1 + m
end
return queued
"""


def _live(status: bytes | None, position: int | None) -> bool:
    if status is None or status.decode() not in {s.value for s in LIVE}:
        return False
    return status.decode() != JobStatus.QUEUED.value or position is not None


def connect(url: str) -> redis.Redis:
    """A client for ``REDIS_URL``: a plain Redis URL, or ``redis+sentinel://…`` (the master the
    sentinels name, looked up again on every new connection: a failover is followed)."""
    options: dict[str, Any] = {"socket_timeout": 5, "socket_connect_timeout": 2, "health_check_interval": 30}
    found = sentinels(url)
    if found is None:
        return redis.Redis.from_url(url, **options)
    from redis.sentinel import Sentinel

    # redis-py's sentinel module carries annotations from 8.2 on and none before: typed as Any,
    # so both pass mypy --strict.
    sentinel_type: Any = Sentinel
    sentinel = sentinel_type(list(found.hosts), socket_timeout=2, socket_connect_timeout=2)
    master: redis.Redis = sentinel.master_for(
        found.service, db=found.db, username=found.username, password=found.password, **options
    )
    return master


def job_id(endpoint: str, event_id: str) -> str:
    """RQ ids allow only ``[A-Za-z0-9_-]``; a hash keeps any event id safe and collision-free."""
    return "wh-" + hashlib.sha256(f"{endpoint}\0{event_id}".encode()).hexdigest()[:40]


_JITTER = random.Random()  # one generator: seeding one per job cost more than building the job
OWN = ("data", "description", "retry_intervals")  # the job hash fields that differ between events


def _text(value: Any) -> str:
    """A job hash value as Redis stores it (RQ's values are text, numbers and enums of text)."""
    if isinstance(value, bytes):
        return value.decode()
    return str(value.value if isinstance(value, Enum) else value)


def retry_intervals(settings: Settings, rng: random.Random | None = None) -> list[int]:
    """Exponential backoff with full jitter on the upper half: base·2^i, capped."""
    rng = rng or _JITTER
    intervals = []
    for attempt in range(settings.max_attempts - 1):
        ceiling = min(settings.retry_max_seconds, settings.retry_base_seconds * 2**attempt)
        intervals.append(round(rng.uniform(ceiling / 2, ceiling)))
    return intervals


class JobQueue:
    """Enqueue, look up and replay the processing job of an event."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.connection: redis.Redis
        if settings.redis_url:
            self.connection = connect(settings.redis_url)
        else:
            import fakeredis  # the embedded default: no Redis server needed

            self.connection = fakeredis.FakeRedis(server=fakeredis.FakeServer())
        self.queue = Queue(settings.queue_name, connection=self.connection)
        self.lane_queue = Queue(settings.queue_name + LANES, connection=self.connection)
        self.queues = [self.queue, self.lane_queue]  # in the order workers take them
        self._enqueue_script = self.connection.register_script(ENQUEUE_MANY)
        self._shaped: dict[str, tuple[int, str, tuple[str, ...]]] = {}
        # endpoint → (the Endpoint it was worked out for, whether it calls out): a snapshot's new
        # Endpoint object for the name (``endpoints``, the runtime's current ones) is worked out again.
        self._calls_out: dict[str, tuple[object, bool]] = {}
        self.endpoints: Callable[[], Mapping[str, Any]] = lambda: settings.endpoints
        self.embedded: Embedded | None = None
        self._start_lock = threading.Lock()
        self.handed_over = False  # ``hand_over``: the jobs are another process's to queue

    def hand_over(self) -> None:
        """From now on queue nothing here: the process whose embedded worker works the events takes
        the committed ``queued`` rows from the database (``webhooks serve``'s web processes:
        ``webhooks.worker.handover``). ``enqueue_many`` and ``requeue`` then succeed without a queue."""
        self.handed_over = True

    def enqueue(self, endpoint: str, event_id: str) -> None:
        """Queue the event's job unless a job with its id exists. Raises ``redis.RedisError``."""
        self.enqueue_many([(endpoint, event_id)])

    def enqueue_many(self, events: list[tuple[str, str]]) -> int:
        """Queue each (endpoint, event_id)'s job unless a job with its id exists, in one round trip;
        returns how many were queued. Raises ``redis.RedisError`` (then none was queued).

        Writes what RQ's unique enqueue writes (the job hash, its TTL, the queue's entry in
        ``rq:queues``, the id pushed on the queue), checked and written by one Lua script for the
        whole batch: RQ's per-call enqueue costs two round trips and a script call. The hash is the
        one RQ's own ``Job`` builds for this queue (``_shape``, built once, from public RQ API;
        tests/worker/test_rq_contract.py pins it to what RQ's ``enqueue(unique=True)`` writes), with this call's
        timestamps and each event's ``data``, ``description`` and jittered ``retry_intervals``
        computed as RQ computes them; the fields all jobs share go as one string (Redis's encoder
        per argument was most of the enqueue's CPU).
        """
        if not events or self.handed_over:
            return len(events)
        lane = [e for e in events if self.queue_for(e[0]) is self.lane_queue]
        if not lane:
            return self._enqueue(self.queue, events)
        main = [e for e in events if self.queue_for(e[0]) is self.queue]
        return (self._enqueue(self.queue, main) if main else 0) + self._enqueue(self.lane_queue, lane)

    def queue_for(self, endpoint: str) -> Queue:
        """The queue of ``endpoint``'s jobs: ``lane_queue`` when its events call its provider's API."""
        configured = self.endpoints().get(endpoint)
        cached = self._calls_out.get(endpoint)
        if cached is None or cached[0] is not configured:
            calls_out = configured is not None and providers.get(configured.kind).calls_out(configured)
            cached = self._calls_out[endpoint] = (configured, calls_out)
        return self.lane_queue if cached[1] else self.queue

    def _enqueue(self, queue: Queue, events: list[tuple[str, str]]) -> int:
        ttl, shape, own = self._shape(queue)
        keys: list[str] = [queue.key, queue.redis_queues_keys]
        args: list[str | bytes | int] = [ttl, shape, utcformat(now())]
        for endpoint, event_id in events:
            jid = job_id(endpoint, event_id)
            keys.append(Job.key_for(jid))
            call = (endpoint, event_id)
            args += [
                jid,
                zlib.compress(queue.serializer.dumps((JOB, None, call, {}))),
                get_call_string(JOB, call, {}, max_length=75) or "",
            ]
            if len(own) == 3:
                args.append(json.dumps(retry_intervals(self.settings)))
        return int(self._enqueue_script(keys=keys, args=args))

    def _shape(self, queue: Queue | None = None) -> tuple[int, str, tuple[str, ...]]:
        """The job TTL, the shape ``ENQUEUE_MANY`` takes (as JSON) and the names of each job's own
        fields: from a job RQ built, once."""
        queue = self.queue if queue is None else queue
        shaped = self._shaped.get(queue.name)
        if shaped is None:
            job = self._build(queue, "", "")
            own = OWN if self.settings.max_attempts > 1 else OWN[:2]
            skip = {*OWN, "created_at", "enqueued_at"}
            # The fields RQ's unique enqueue writes: the job's ``to_dict`` without its None values.
            shared = [
                _text(item) for k, v in job.to_dict().items() if k not in skip and v is not None for item in (k, v)
            ]
            shaped = self._shaped[queue.name] = (-1 if job.ttl is None else job.ttl, json.dumps([shared, own]), own)
        return shaped

    def build(self, endpoint: str, event_id: str) -> Job:
        """The event's job as RQ builds it for ``enqueue`` (not saved)."""
        return self._build(self.queue_for(endpoint), endpoint, event_id)

    def _build(self, queue: Queue, endpoint: str, event_id: str) -> Job:
        retries = self.settings.max_attempts - 1
        queue.get_redis_server_version()  # cached: once per queue (RQ stores it on the job)
        job = queue.create_job(
            JOB,
            args=(endpoint, event_id),
            job_id=job_id(endpoint, event_id),
            retry=Retry(max=retries, interval=retry_intervals(self.settings)) if retries else None,
            timeout=self.settings.job_timeout,
            result_ttl=500,
            failure_ttl=7 * 24 * 3600,
            status=JobStatus.QUEUED,
        )
        # What RQ's enqueue sets before saving (the origin is set by ``create_job``); pinned against
        # RQ's own ``enqueue(unique=True)`` by tests/worker/test_rq_contract.py.
        job.redis_server_version = queue.get_redis_server_version()
        job.enqueued_at = now()
        return job

    def _job(self, endpoint: str, event_id: str) -> Job | None:
        try:
            return Job.fetch(job_id(endpoint, event_id), connection=self.connection)
        except NoSuchJobError:
            return None

    def live(self, events: list[tuple[str, str]], *, unclaimed: bool = False) -> list[bool]:
        """For each (endpoint, event_id): whether its job is live — one Redis round trip for all.

        A job whose hash says ``queued`` is live only while its id is in the queue: a worker moves
        the id out (into RQ's intermediate list) before it marks the job ``started``, so a worker
        killed in between leaves a job that says ``queued`` and that nobody will ever run.
        ``unclaimed``: the caller knows the rows were not claimed for longer than a live worker
        takes to claim one, so a ``started`` job is a killed worker's, not a live one.
        """
        with self.connection.pipeline(transaction=False) as pipe:
            for endpoint, event_id in events:
                jid = job_id(endpoint, event_id)
                pipe.hget(Job.key_for(jid), "status")
                pipe.lpos(self.queue_for(endpoint).key, jid)
            replies = pipe.execute()
        return [
            _live(status, position) and not (unclaimed and status == JobStatus.STARTED.value.encode())
            for status, position in zip(replies[::2], replies[1::2], strict=True)
        ]

    def requeue(self, endpoint: str, event_id: str, *, force: bool = False) -> bool:
        """Enqueue a fresh job unless a live one exists; a finished or failed job is dropped first.

        ``force`` drops a "live" job too: the caller has proven from the database that nobody runs
        it (a killed worker's job stays *started* in RQ until its timeout). Returns False when a
        live job was already there.
        """
        job = self._job(endpoint, event_id)
        if job is not None:
            if not force and self.live([(endpoint, event_id)])[0]:
                return False
            try:
                job.delete()
            except (InvalidJobOperation, NoSuchJobError):
                pass  # a concurrent replay of this event deleted it first: enqueue below all the same
        self.enqueue(endpoint, event_id)
        return True

    def defer(self, endpoint: str, event_id: str, seconds: float, retries_left: int | None = None) -> bool:
        """Run the event's job again in ``seconds`` (RQ's scheduler; the ticker moves it to the
        queue when due): a fresh job under the event's id keeping the ended one's ``retries_left``
        unless given. A live job is left alone (False). Raises ``redis.RedisError``."""
        job = self._job(endpoint, event_id)
        if job is not None:
            if self.live([(endpoint, event_id)])[0]:
                return False
            if retries_left is None:
                retries_left = job.retries_left
            try:
                job.delete()
            except (InvalidJobOperation, NoSuchJobError):
                pass
        fresh = self.build(endpoint, event_id)
        if retries_left is not None and fresh.retries_left is not None:
            fresh.retries_left = max(0, min(fresh.retries_left, retries_left))
        self.queue_for(endpoint).schedule_job(fresh, now() + timedelta(seconds=seconds))
        return True

    def admit(self, events: list[tuple[str, str]]) -> int:
        """Queue the jobs of events the database says are ``queued`` (``webhooks.worker.handover``): a job
        for each that has none, and a fresh one for each whose job ended (a replay); one that is
        live is left alone. Returns how many were queued."""
        with self.connection.pipeline(transaction=False) as pipe:
            for endpoint, event_id in events:
                pipe.exists(Job.key_for(job_id(endpoint, event_id)))
            found = pipe.execute()
        fresh = [key for key, exists in zip(events, found, strict=True) if not exists]
        again = [key for key, exists in zip(events, found, strict=True) if exists]  # rare: a replay
        return self.enqueue_many(fresh) + sum(self.requeue(*key) for key in again)

    def start_embedded(self, build: Callable[[], Embedded]) -> None:
        """Start the in-process worker ``build`` makes (``webhooks.worker.embedded``: a worker thread, the
        scheduler/sweeper ticker, a watchdog), unless one runs already."""
        with self._start_lock:  # two first requests at once must not start two workers
            if self.embedded is None:
                self.embedded = build()
                self.embedded.start()


class Embedded(Protocol):
    """What ``start_embedded`` starts (``webhooks.worker.embedded.EmbeddedWorker``)."""

    def start(self) -> None: ...
