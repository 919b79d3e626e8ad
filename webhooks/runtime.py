"""The live parts built from ``Settings``: engine, sessions, queue. One per app or worker.

Jobs take plain ids, so they find their runtime here: the one bound to the current thread (an
embedded worker binds its app's), else the process-wide one, else one built from the environment.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session, sessionmaker

from webhooks import config
from webhooks.config import Settings
from webhooks.db import make_engine, make_sessionmaker
from webhooks.models import Event
from webhooks.queue import JobQueue

_local = threading.local()
_process: Runtime | None = None
_lock = threading.Lock()


class Runtime:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.engine: Engine = make_engine(settings.database_url)
        self.sessions: sessionmaker[Session] = make_sessionmaker(self.engine)
        self.queue = JobQueue(settings)

    def activate(self) -> Runtime:
        """Make this the process-wide runtime."""
        global _process
        _process = self
        return self

    def bind(self) -> None:
        """Make this the runtime of the current thread."""
        _local.runtime = self

    def start_embedded_worker(self) -> None:
        if self.settings.embedded_queue and self.settings.embedded_worker:
            self.queue.start_embedded(self.bind, self.sweep)

    def sweep(self, now: datetime | None = None, limit: int = 500) -> int:
        """Re-enqueue events stranded between commit and queue (outbox recovery); returns how many.

        ``received`` rows older than the threshold never reached Redis; ``queued`` ones whose job
        is gone (a flushed or restarted Redis) lost it. Safe anywhere, any time: enqueue is
        idempotent and processing claims each row.
        """
        cutoff = (now or datetime.now(UTC)) - timedelta(seconds=self.settings.sweep_age)
        query = (
            select(Event.provider, Event.event_id, Event.status)
            .where(Event.status.in_(("received", "queued")), Event.status_at < cutoff)
            .order_by(Event.status_at)
            .limit(limit)
        )
        with self.sessions() as session:
            rows = session.execute(query).all()
        swept = 0
        for provider, event_id, status in rows:
            if not self.queue.requeue(provider, event_id):
                continue
            swept += 1
            with self.sessions.begin() as session:
                session.execute(
                    update(Event)
                    .where(Event.provider == provider, Event.event_id == event_id, Event.status == status)
                    .values(status="queued", status_at=datetime.now(UTC))
                )
        return swept


def current() -> Runtime:
    bound: Runtime | None = getattr(_local, "runtime", None)
    if bound is not None:
        return bound
    global _process
    with _lock:
        if _process is None:
            _process = Runtime(config.load())
        return _process
