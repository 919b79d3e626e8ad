"""The live parts built from ``Settings``: engine, sessions, queue. One per app or worker.

``settings`` is the current snapshot: the file's settings with the database's endpoints and
destinations laid over them (``webhooks.configuration.live``), swapped whole for a new immutable one
when the configuration changes (``start_config``: within a second, ``webhooks.runtime.watch``).
Everything reads ``rt.settings`` when it needs it, never a copy taken at start.

Each app and each worker owns its runtime; none is process-wide. Jobs take plain ids, so they find
theirs with ``current()``: the one their worker put in scope around the job (``Runtime.scope``).
A job run where none is in scope is an error, never a runtime guessed from the environment.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Hashable, Iterator
from contextvars import ContextVar
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from webhooks import metrics, tracing
from webhooks.configuration import live as live_config
from webhooks.configuration.live import Item
from webhooks.configuration.settings import Settings
from webhooks.engines import deferred, make_engine, make_sessionmaker, sqlite_lock
from webhooks.errors import NoRuntimeError
from webhooks.lanes import Lanes
from webhooks.queue import JobQueue
from webhooks.runtime.watch import Watcher
from webhooks.store import Store, open_store
from webhooks.store.configuration import items as config_items
from webhooks.store.configuration.snapshot import changed_since

log = logging.getLogger(__name__)
_current: ContextVar[Runtime | None] = ContextVar("webhooks_runtime", default=None)
_plain: Runtime | None = None  # the one a plain `rq worker`'s jobs build (see ``current``)
_plain_lock = threading.Lock()


class Runtime:
    def __init__(self, settings: Settings) -> None:
        self.file_settings = settings  # the file's and the environment's: what every snapshot starts from
        self.settings = settings
        self.config_version = 0  # the database's configuration version ``settings`` holds
        self.config_next_change: datetime | None = None  # a secret's window opens or closes then
        self._reloading = threading.Lock()
        # What the last reload opened and built, by name: an item unchanged is not opened or built again.
        self._opened: dict[str, tuple[Hashable, Item]] = {}
        self._built: dict[str, tuple[Item, Any]] = {}
        self._left_out: dict[str, str] = {}  # the items refused by the last reload, and why
        self._loaded = False  # a full read is held (then a change may be read alone)
        self._last_change = 0  # the newest config_changes id the held configuration includes
        self.watcher: Watcher | None = None
        tracing.setup(settings.tracing)  # once per process: its first runtime's settings
        self.engine: Engine = make_engine(settings.database_url)
        self.sessions: sessionmaker[Session] = make_sessionmaker(self.engine)
        # SQLite transactions that wait for no writer until they write: for reads, and for the
        # worker's handlers (PostgreSQL: the same as ``sessions``).
        self.deferred_sessions: sessionmaker[Session] = make_sessionmaker(deferred(self.engine))
        self._processing_lock = sqlite_lock(self.engine, "-processing.lock")
        self.queue = JobQueue(settings)
        self.queue.endpoints = lambda: self.settings.endpoints
        self.lanes = Lanes()  # per-endpoint threads for events that call their provider's API
        self.store: Store = open_store(
            self.engine, lock=self.processing, sessions=self.sessions, deferred_sessions=self.deferred_sessions
        )

    def start_config(self, *, watch: bool = True) -> None:
        """Lay the database's endpoints and destinations over the file's, then (``watch``) follow
        every change. A secret sealed under a key not configured stops start-up (``UnknownKeyError``,
        one line naming the key id); a database not ready yet leaves the file's until it is."""
        try:
            self.reload_config()
        except SQLAlchemyError as exc:
            log.warning("runtime configuration not read (%s): the file's for now", exc.__class__.__name__)
        if watch and self.watcher is None:
            self.watcher = Watcher(self).start()

    def reload_config(self, now: datetime | None = None) -> None:
        """Read the database's items and swap in the merged snapshot: only the endpoints changed
        since the held version when that is all that changed (``config_snapshot.changed_since``),
        else every item. An item that fails the file's validation (or whose secrets do not open)
        is refused: the configuration of it in effect stays (a new one is left out), and the error
        is logged and counted once. A bad row can never take a process down, nor what worked
        before it was written."""
        with self._reloading:
            if self._absent():
                return
            when = now or datetime.now(UTC)
            problems: dict[str, str] = {}

            def skipped(item: Item, why: str) -> None:
                problems[item.name] = why

            due = self.config_next_change is not None and when >= self.config_next_change
            if self._loaded and not due and self._changed_only(when, skipped, problems):
                return
            with self.deferred_sessions() as session:
                snap = config_items.snapshot(session, self.file_settings.keyring, now=when, previous=self._opened)
            self.settings = live_config.merged(
                self.file_settings, snap.items, skipped, self._built, self.settings, snap.broken
            )
            self._said(problems, replace=True)
            self._opened, self._last_change, self._loaded = dict(snap.keys), snap.last_change, True
            self.config_version, self.config_next_change = snap.version, snap.next_change

    def _changed_only(self, when: datetime, skipped: Callable[[Item, str], None], problems: dict[str, str]) -> bool:
        """Apply only what changed since the held version; False when a full read is needed."""
        with self.deferred_sessions() as session:
            found = changed_since(
                session,
                self.file_settings.keyring,
                version=self.config_version,
                last_change=self._last_change,
                now=when,
            )
        if found is None:
            return False
        items = {name: (kept[1] if kept else None) for name, kept in found.items.items()}
        for name, why in found.broken.items():
            items.pop(name, None)
            problems[name] = why + (
                "; its last valid configuration stays in effect" if name in self.settings.endpoints else ""
            )
        self.settings = live_config.changed(self.file_settings, self.settings, items, skipped, self._built)
        for name, kept in found.items.items():
            if kept is None:
                self._opened.pop(name, None)
            else:
                self._opened[name] = kept
        self._said(problems, replace=False, changed=set(found.items) | set(found.broken))
        nexts = [n for n in (self.config_next_change, found.next_change) if n is not None]
        self.config_version, self._last_change = found.version, found.last_change
        self.config_next_change = min(nexts, default=None)
        return True

    def _said(self, problems: dict[str, str], *, replace: bool, changed: set[str] | None = None) -> None:
        """Log and count each refused item once (not again at every reload while it stays so)."""
        for name, why in problems.items():
            if self._left_out.get(name) != why:
                log.error("runtime configuration: %s refused: %s", name, why)
                metrics.CONFIG_REJECTED.inc()
        if replace:
            self._left_out = problems
        else:
            for name in changed or ():
                self._left_out.pop(name, None)
            self._left_out.update(problems)

    def _absent(self) -> bool:
        """A SQLite file not created yet: nothing to read, and reading would create it."""
        url = self.engine.url
        name = url.database or ""
        return url.get_backend_name() == "sqlite" and name not in ("", ":memory:") and not Path(name).exists()

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
        ``webhooks.worker.claims.abandon``); False if it holds none (or there is no such lock)."""
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
            from webhooks.configuration import settings as config

            if not config.variable("REDIS_URL"):
                raise NoRuntimeError(
                    "no webhooks runtime in scope: run jobs with `webhooks worker` (or `rq worker -w "
                    "webhooks.jobs.worker.Worker`), whose worker puts its runtime in scope for each job, or "
                    "with a plain `rq worker` where REDIS_URL and DATABASE_URL are set"
                )
            from webhooks.configuration import settings as config

            _plain = Runtime(config.load())
            log.info("a plain rq worker: the runtime was built from the environment")
        return _plain
