"""Engines and sessions. SQLite gets WAL, a busy timeout and ``BEGIN IMMEDIATE`` transactions
(``deferred(engine)``: plain ``BEGIN``, for transactions that must not wait for a writer), and a
file lock beside its database (``sqlite_lock``); ``upsert`` is the dialect's insert-or-update.
What makes a value storable on both databases is ``webhooks.storable``.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import Session, sessionmaker


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(
            url, connect_args={"timeout": 30, "check_same_thread": False}, pool_size=5, max_overflow=20
        )
        _sqlite_setup(engine)
        return engine
    # psycopg prepares a statement it ran 5 times, and on every ROLLBACK of such a connection
    # sends DEALLOCATE ALL, which drops the statements processing prepares itself
    # (``webhooks.store.pgwire``): pooled connections leave preparing to those who keep them.
    engine = create_engine(
        url, pool_size=10, max_overflow=20, pool_timeout=10, connect_args={"prepare_threshold": None}
    )
    _ping_when_idle(engine)
    _utc_sessions(engine)
    return engine


def _utc_sessions(engine: Engine) -> None:
    """Every connection's ``TimeZone`` is UTC, whatever the server's default: psycopg reads a
    ``timestamptz`` in the session's zone, and 9999-12-31T23:59:59Z read in a zone east of UTC is
    in year 10000, which no Python datetime holds (a stored secret expiry would fail every read)."""

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.execute("SET TIME ZONE 'UTC'")
        dbapi_connection.commit()


PING_IDLE = 1.0  # seconds a pooled connection may rest before its check-out pings it


def _ping_when_idle(engine: Engine) -> None:
    """SQLAlchemy's pre-ping, for connections that rested: a database restarted under us (which
    takes longer than ``PING_IDLE``) is noticed at check-out, not as a failed request, and a
    connection checked in a moment ago is handed out without a round trip (a worker checks one
    out per event: the ping was one of its few round trips). A connection that died within the
    moment fails its first statement; SQLAlchemy then invalidates the pool."""

    @event.listens_for(engine, "checkin")
    def _checkin(_dbapi_connection: Any, record: Any) -> None:
        if record is not None:
            record.info[_RESTED] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        rested = record.info.get(_RESTED)  # None: just connected
        if rested is not None and not alive(engine, dbapi_connection, rested):
            raise DisconnectionError("the connection did not answer a ping")  # the pool replaces it


_RESTED = "webhooks_rested_at"


def alive(engine: Engine, dbapi_connection: Any, rested_since: float) -> bool:
    """Whether a connection that rested since ``rested_since`` (``time.monotonic``) may be used:
    at once if that was less than ``PING_IDLE`` ago, else if it answers a ping."""
    if time.monotonic() - rested_since < PING_IDLE:
        return True
    try:
        return bool(engine.dialect.do_ping(dbapi_connection))
    except engine.dialect.loaded_dbapi.Error:
        return False


def _sqlite_setup(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control from pysqlite so BEGIN IMMEDIATE below is the only BEGIN.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        # Writers queue on the lock up front instead of failing at their first write. A deferred
        # transaction takes the lock only at its first write: readers never wait for a writer.
        deferred = connection.get_execution_options().get(DEFERRED, False)
        connection.exec_driver_sql("BEGIN" if deferred else "BEGIN IMMEDIATE")


DEFERRED = "webhooks_deferred"


def deferred(engine: Engine) -> Engine:
    """The same engine (pool, settings) whose SQLite transactions begin deferred: they wait for no
    writer until they write, but one that reads and then writes after another writer committed
    fails at once (``is_busy``). PostgreSQL ignores the option."""
    return engine.execution_options(**{DEFERRED: True})


def is_busy(exc: BaseException) -> bool:
    """SQLite refused a write: the lock is held, or this transaction's snapshot is stale."""
    code = getattr(getattr(exc, "orig", None), "sqlite_errorcode", None)
    return code is not None and code & 0xFF == 5  # SQLITE_BUSY and its extended codes (BUSY_SNAPSHOT)


class FileLock:
    """One exclusive lock for every thread and process using a SQLite file: ``flock`` on a file
    beside it (the OS drops it when its holder dies). Polled, so a job timeout can interrupt a wait.
    ``abandon`` takes it back from a thread stuck while holding it (a thread cannot be killed)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._local = threading.Lock()  # no file (an in-memory database): one process only
        self._holders: dict[int, int | threading.Lock] = {}  # thread → its fd (or the lock it took)
        self._guard = threading.Lock()  # an fd is closed under it: ``abandon`` never unlocks a reused one

    @contextmanager
    def hold(self, timeout: float | None = None) -> Iterator[bool]:
        """Yield True while held, or False when ``timeout`` seconds passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        thread = threading.get_ident()
        if self.path is None:
            local = self._local  # ``abandon`` may replace it: release the one taken
            got = local.acquire(timeout=-1 if timeout is None else timeout)
            try:
                if got:
                    self._holders[thread] = local
                yield got
            finally:
                if got:
                    self._drop(thread, local)
                    local.release()
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:  # each open is its own file description, so threads of one process exclude each other
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if deadline is not None and time.monotonic() > deadline:
                        yield False
                        return
                    time.sleep(0.01)
            self._holders[thread] = fd
            yield True
        finally:
            with self._guard:
                self._drop(thread, fd)
                os.close(fd)  # releases the flock

    def _drop(self, thread: int, held: int | threading.Lock) -> None:
        if self._holders.get(thread) == held:
            del self._holders[thread]

    def abandon(self, thread: int) -> bool:
        """Release the lock ``thread`` holds; False if it holds none. The thread goes on unlocked:
        what it does next must be made harmless otherwise (a job's claim token)."""
        with self._guard:
            held = self._holders.pop(thread, None)
            if held is None:
                return False
            if isinstance(held, int):
                fcntl.flock(held, fcntl.LOCK_UN)  # its fd stays open: the holder closes it
            else:
                self._local = threading.Lock()  # the holder releases the old one, which nobody waits on
            return True


def sqlite_lock(engine: Engine, suffix: str) -> FileLock | None:
    """A ``FileLock`` beside the engine's SQLite file (None for other databases)."""
    if engine.dialect.name != "sqlite":
        return None
    database = engine.url.database
    return FileLock(None if not database or database == ":memory:" else os.path.abspath(database) + suffix)


def upsert(bind: Session | Connection, table: Any) -> Any:
    """``INSERT`` with ``ON CONFLICT`` support for the dialect in use (PostgreSQL or SQLite)."""
    engine = bind.get_bind() if isinstance(bind, Session) else bind
    insert = postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert
    return insert(table)


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)
