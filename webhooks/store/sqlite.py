"""The SQLite adapter: the embedded default (SQLAlchemy throughout)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, select

from webhooks.engines import deferred, sqlite_lock
from webhooks.store import sqlite_worker
from webhooks.store.base import Claimed, Key, Work
from webhooks.store.sql import SqlStore, lease_over
from webhooks.tables.events import Event, unfinished
from webhooks.timestamps import aware
from webhooks.vocabulary import Status

Hold = Callable[[float | None], AbstractContextManager[bool]]  # ``Runtime.processing``'s shape
HOLD_TIMEOUT = 5.0  # seconds the sweeper waits for the processing lock (a job keeps it: next tick)


class SqliteStore(SqlStore):
    def __init__(self, engine: Engine, **parts: Any) -> None:
        super().__init__(engine, **parts)
        # The runtime's processing lock (``Runtime.processing``): held by a job from claim to mark.
        self.processing: Hold = parts.get("lock") or _own_lock(engine)

    # ===== the worker: claim, process (handlers outside the write lock), mark ==================
    def claim(self, endpoint: str, event_id: str, now: datetime, until: datetime) -> Claimed | None:
        """``CLAIM`` leased ``until`` (``sqlite_worker.claim``), committed."""
        with self.sessions.begin() as session:
            return sqlite_worker.claim(session, endpoint, event_id, now, until)

    def process(self, claimed: Claimed, work: Work, started_at: datetime) -> str:
        """The handlers outside SQLite's write lock, the mark in a short write (``sqlite_worker``)."""
        return sqlite_worker.process(self.sessions, self.deferred_sessions, claimed, work, started_at)

    # ===== the receiver, the sweeper: a processing row is abandoned only under the lock ========
    def abandoned(self, cutoff: datetime, limit: int, max_attempts: int, now: datetime) -> list[Key]:
        """A job holds the processing lock from its claim to its mark: with the lock held, no
        ``processing`` row is live (and when a job keeps it past ``HOLD_TIMEOUT``, none is taken).
        The lock is waited for only when some row's lease is over: a live job's lease tells the
        sweeper at once, without waiting for its job."""
        with self.reads() as session:
            candidate = session.scalar(select(Event.event_id).where(*lease_over(cutoff, now)).limit(1))
        if candidate is None:
            return []
        with self.processing(HOLD_TIMEOUT) as held:
            return super().abandoned(cutoff, limit, max_attempts, now) if held else []

    # ===== ``webhooks serve``: its web processes hand events on through the database ===========
    def queued_since(self, since: datetime, limit: int) -> list[tuple[str, str, datetime]]:
        """``queued`` rows whose status changed at ``since`` or later, oldest first: (endpoint,
        event_id, status_at); ``ix_events_unfinished`` answers it, its range in the index's order
        (``webhooks.worker.handover``): the query repeats the index's predicate, or SQLite would not use it."""
        query = (
            select(Event.endpoint, Event.event_id, Event.status_at)
            .where(Event.status == Status.QUEUED, Event.status_at >= since, unfinished())
            .order_by(Event.status_at)
            .limit(limit)
        )
        with deferred(self.engine).connect() as conn:  # a plain read: no write lock, no ORM objects
            return [(p, e, aware(at)) for p, e, at in conn.execute(query)]


def _own_lock(engine: Engine) -> Hold:
    """The processing lock of a store built without a runtime (the file lock beside the database)."""
    lock = sqlite_lock(engine, "-processing.lock")

    @contextlib.contextmanager
    def hold(timeout: float | None) -> Iterator[bool]:
        if lock is None:
            yield True
            return
        with lock.hold(timeout) as held:
            yield held

    return hold
