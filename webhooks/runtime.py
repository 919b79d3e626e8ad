"""The live parts built from ``Settings``: engine, sessions, queue. One per app or worker.

Each app and each worker owns its runtime; none is process-wide. Jobs take plain ids, so they find
theirs with ``current()``: the one their worker put in scope around the job (``Runtime.scope``).
A job run where none is in scope is an error, never a runtime guessed from the environment.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, select, tuple_, update
from sqlalchemy.orm import Session, sessionmaker

from webhooks.config import Settings
from webhooks.db import deferred, make_engine, make_sessionmaker, sqlite_lock
from webhooks.errors import NoRuntimeError
from webhooks.metrics import RECOVERIES
from webhooks.models import Event
from webhooks.queue import JobQueue
from webhooks.store import open_store
from webhooks.words import Status

log = logging.getLogger(__name__)
SWEEP_PAGE = 500
_current: ContextVar[Runtime | None] = ContextVar("webhooks_runtime", default=None)
_plain: Runtime | None = None  # the one a plain `rq worker`'s jobs build (see ``current``)
_plain_lock = threading.Lock()


class Runtime:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.engine: Engine = make_engine(settings.database_url)
        self.sessions: sessionmaker[Session] = make_sessionmaker(self.engine)
        # SQLite transactions that wait for no writer until they write: for reads, and for the
        # worker's handlers (PostgreSQL: the same as ``sessions``).
        self.deferred_sessions: sessionmaker[Session] = make_sessionmaker(deferred(self.engine))
        self._processing_lock = sqlite_lock(self.engine, "-processing.lock")
        self.queue = JobQueue(settings)
        self.store = open_store(self.engine, sessions=self.sessions, deferred_sessions=self.deferred_sessions)

    @contextlib.contextmanager
    def processing(self, timeout: float | None = None) -> Iterator[bool]:
        """On SQLite, serialize event processing across threads and processes (the role the write
        lock had when handlers ran inside it); yields False if ``timeout`` passed first. Elsewhere
        a no-op: PostgreSQL serializes on row and advisory locks."""
        if self._processing_lock is None:
            yield True
            return
        with self._processing_lock.hold(timeout) as held:
            yield held

    def release_processing(self, thread: int) -> bool:
        """Take the processing lock back from ``thread`` (a job stuck past its timeout: see
        ``webhooks.store.claims.abandon``); False if it holds none (or there is no such lock)."""
        return self._processing_lock is not None and self._processing_lock.abandon(thread)

    @contextlib.contextmanager
    def scope(self) -> Iterator[Runtime]:
        """Make this the current runtime inside the block (a worker: around each job it performs)."""
        token = _current.set(self)
        try:
            yield self
        finally:
            _current.reset(token)

    def bind(self) -> None:
        """Make this the current runtime of this thread from now on (tests that run jobs by hand)."""
        _current.set(self)

    def sweep(self, now: datetime | None = None, limit: int = 20_000, age: float | None = None) -> int:
        """Re-enqueue events stranded on their way through the queue (outbox recovery); returns how many.

        Rows older than ``age`` (default ``WEBHOOKS_SWEEP_AGE``): ``received`` ones never reached
        Redis; ``queued`` ones whose job is gone lost it (a flushed or restarted Redis); and
        ``processing`` ones that no transaction holds were abandoned by a killed worker — those
        are requeued (or marked ``failed`` once they have used every attempt, so an event that
        kills its worker cannot loop). Safe anywhere, any time: enqueue is idempotent and
        processing claims each row with a token.
        """
        age = self.settings.sweep_age if age is None else age
        cutoff = (now or datetime.now(UTC)) - timedelta(seconds=age)
        swept = 0
        for endpoint, event_id in self._abandoned(cutoff, limit):
            self.queue.requeue(endpoint, event_id, force=True)
            swept += 1
            RECOVERIES.inc()
        # Walk every stale row (keyset pages), checking their jobs a page per Redis round trip:
        # under a backlog most `queued` rows have live jobs, and a stranded row must not hide
        # behind them.
        base = (
            select(Event.status_at, Event.endpoint, Event.event_id, Event.status)
            .where(Event.status.in_((Status.RECEIVED, Status.QUEUED)), Event.status_at < cutoff)
            .order_by(Event.status_at, Event.endpoint, Event.event_id)
            .limit(SWEEP_PAGE)
        )
        after: tuple[datetime, str, str] | None = None
        seen = 0
        while seen < limit:
            key = tuple_(Event.status_at, Event.endpoint, Event.event_id)
            query = base if after is None else base.where(key > after)
            with self.sessions() as session:
                rows = session.execute(query).all()
            if not rows:
                break
            seen += len(rows)
            after = tuple(rows[-1][:3])  # type: ignore[assignment]
            # These rows are not claimed yet: a job that says `started` for one of them past the
            # sweep age belongs to a worker killed between taking it and claiming the row.
            live = self.queue.live([(p, e) for _, p, e, _ in rows], unclaimed=True)
            for (_, endpoint, event_id, status), is_live in zip(rows, live, strict=True):
                if is_live:
                    continue
                self.queue.requeue(endpoint, event_id, force=True)  # claim tokens make a race harmless
                swept += 1
                RECOVERIES.inc()
                with self.sessions.begin() as session:
                    session.execute(
                        update(Event)
                        .where(Event.endpoint == endpoint, Event.event_id == event_id, Event.status == status)
                        .values(status=Status.QUEUED, status_at=datetime.now(UTC))
                    )
        return swept

    def _abandoned(self, cutoff: datetime, limit: int) -> list[tuple[str, str]]:
        """``processing`` rows nobody holds → ``queued`` (or ``failed``); returns those to requeue.

        A live job holds its row locked for its whole transaction: PostgreSQL skips those rows
        (``SKIP LOCKED``). On SQLite a job holds the processing lock from its claim to its mark:
        with that lock held none is live (and when a job keeps it, this tick leaves them be).
        """
        with self.processing(timeout=5) as held:
            return self._requeue_abandoned(cutoff, limit) if held else []

    def _requeue_abandoned(self, cutoff: datetime, limit: int) -> list[tuple[str, str]]:
        now = datetime.now(UTC)
        query = (
            select(Event.endpoint, Event.event_id, Event.attempts)
            .where(Event.status == Status.PROCESSING, Event.status_at < cutoff)
            .order_by(Event.status_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        requeue = []
        with self.sessions.begin() as session:
            for endpoint, event_id, attempts in session.execute(query).all():
                exhausted = attempts >= self.settings.max_attempts
                values: dict[str, object] = {"status": Status.FAILED if exhausted else Status.QUEUED, "status_at": now}
                if exhausted:
                    values["last_error"] = "AbandonedJobError: the worker died while processing this event"
                else:
                    requeue.append((endpoint, event_id))
                session.execute(
                    update(Event).where(Event.endpoint == endpoint, Event.event_id == event_id).values(**values)
                )
                log.warning("sweeper: %s/%s abandoned by its worker, %s", endpoint, event_id,
                            "failed" if exhausted else "requeued")
        return requeue


def current() -> Runtime:
    """The runtime in scope (``Runtime.scope``): the one of the worker performing this job.

    A plain ``rq worker`` (the Procfile may run RQ's own CLI) puts none in scope: nothing of ours
    runs in it but the job. Its jobs share one runtime built from the environment, once per
    process; only where the environment names the Redis (``REDIS_URL``) such a worker took the job
    from, so a job run anywhere else fails naming the cause instead of guessing a database.
    """
    found = _current.get()
    if found is not None:
        return found
    global _plain
    with _plain_lock:
        if _plain is None:
            if not os.environ.get("REDIS_URL"):
                raise NoRuntimeError(
                    "no webhooks runtime in scope: run jobs with `webhooks worker` (or `rq worker -w "
                    "webhooks.jobs.worker.Worker`), whose worker puts its runtime in scope for each job, or "
                    "with a plain `rq worker` where REDIS_URL and DATABASE_URL are set"
                )
            from webhooks import config

            _plain = Runtime(config.load())
            log.info("a plain rq worker: the runtime was built from the environment")
        return _plain
