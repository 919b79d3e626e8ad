"""Processing one event on PostgreSQL (``process``, after ``jobs.process`` claimed it), in three
round trips: statements several to a message, prepared once per connection.

A worker is bound by round trips, not by the statements they carry: on the 2-core machine of
``benchmarks/README.md`` one costs ≈ 0.2 ms of wall time and ≈ 0.13 ms of the worker's CPU, and
processing an event through SQLAlchemy's ORM took about thirteen (pool ping, ``BEGIN``, each
statement, ``COMMIT``, twice). Here each step is one simple-query message of plain SQL texts:
psycopg's ``ClientCursor`` binds the parameters on the client (libpq's quoting), PostgreSQL runs
the statements in order, each with a snapshot of its own, and stops at the first error. The
statements themselves are ``PREPARE``d once per connection and run by ``EXECUTE`` (planned once).
The connection is in autocommit, so the texts open and close their transactions themselves and
psycopg adds no ``BEGIN`` round trip; a Session on the same connection (the handlers') works inside
the transaction a text left open.

The steps:

- claim: ``BEGIN; SET LOCAL synchronous_commit TO off; UPDATE … RETURNING; COMMIT``
- lock: ``BEGIN``; the event row ``FOR UPDATE``; the object's advisory lock; the conditional
  upsert, returning the stored version and state (the offered row, or the newer one kept)
- mark, after the handlers: the event row and its attempt's row in one statement; ``COMMIT``

Without handlers nothing runs between lock and mark, so they are one message. A folding provider
(Adyen) reads the stored state in the lock step and upserts the merged state in a message of its
own. The upsert and the mark re-check the claim, so a superseded claim changes nothing.
"""

from __future__ import annotations

import json
import re
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, NamedTuple

import psycopg
from psycopg.errors import InvalidSqlStatementName
from psycopg.pq import ExecStatus, TransactionStatus
from psycopg.types.json import Jsonb
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError, ProgrammingError

from webhooks import db, providers, runtime
from webhooks.db import storable_key
from webhooks.jobs import handlers
from webhooks.jobs.objects import merge, prepare
from webhooks.words import CLAIMABLE, Status

TUPLES_OK = ExecStatus.TUPLES_OK
IDLE = TransactionStatus.IDLE
PROCESSING = repr(str(Status.PROCESSING))  # a literal of the statements


class Claimed(NamedTuple):
    """The claimed event row: what processing reads of it (``attempts`` is the claim's token)."""

    endpoint: str
    event_id: str
    kind: str
    event_type: str
    attempts: int
    payload: bytes
    item_index: int | None
    object_type: str | None
    object_id: str | None
    object_version: int | None


class Statement:
    """A statement prepared once per connection (``PREPARE``) and run by name (``EXECUTE``): the
    server plans it once, not in every message. Written with named parameters, as psycopg's."""

    def __init__(self, name: str, text: str) -> None:
        names = list(dict.fromkeys(_PARAM.findall(text)))
        self.name = f"webhooks_{name}"
        self.prepare = f"PREPARE {self.name} AS " + _PARAM.sub(lambda m: f"${names.index(m[1]) + 1}", text)
        self.execute = f"EXECUTE {self.name}({', '.join(f'%({n})s' for n in names)})"


_PARAM = re.compile(r"%\((\w+)\)s")
BEGIN = "BEGIN"
COMMIT = "COMMIT"
ASYNC_COMMIT = "SET LOCAL synchronous_commit TO off"
CLAIM = Statement("claim", (
    f"UPDATE events SET status = {PROCESSING}, attempts = attempts + 1, status_at = %(now)s"
    f" WHERE endpoint = %(endpoint)s AND event_id = %(event_id)s"
    f" AND status IN ({', '.join(repr(str(s)) for s in CLAIMABLE)})"
    f" RETURNING {', '.join(Claimed._fields)}"
))
# The row as it is now (FOR UPDATE reads the latest committed version): ours while it is still
# processing under our claim's attempt number.
LOCK_ROW = Statement("lock_row", "SELECT status, attempts FROM events"
                     " WHERE endpoint = %(endpoint)s AND event_id = %(event_id)s FOR UPDATE")
LOCK_OBJECT = Statement("lock_object", "SELECT pg_advisory_xact_lock(hashtextextended(%(lock)s, 0))")
READ_OBJECT = Statement("read_object", "SELECT state FROM objects"
                        " WHERE endpoint = %(endpoint)s AND object_type = %(type)s AND object_id = %(id)s")
# The claim is still ours (after LOCK_ROW, which waited for any other holder of the row).
_MINE = ("EXISTS (SELECT FROM events WHERE endpoint = %(endpoint)s AND event_id = %(event_id)s"
         f" AND status = {PROCESSING} AND attempts = %(attempt)s)")
# The stored state moves only to a strictly newer version; either way the stored row comes back
# (the second branch's snapshot is taken after the advisory lock: no writer of it is in flight).
# Nothing is written or returned if the claim is no longer ours.
UPSERT = Statement("upsert", (
    "WITH offered AS (INSERT INTO objects"
    " (endpoint, object_type, object_id, version, state, last_event_id, updated_at)"
    " SELECT %(endpoint)s::text, %(type)s::text, %(id)s::text, %(version)s::bigint, %(state)s::jsonb,"
    " %(last)s::text, %(now)s::timestamptz WHERE " + _MINE +
    " ON CONFLICT (endpoint, object_type, object_id) DO UPDATE SET version = excluded.version,"
    " state = excluded.state, last_event_id = excluded.last_event_id, updated_at = excluded.updated_at"
    " WHERE objects.version < excluded.version RETURNING version, state)"
    " SELECT version, state FROM offered UNION ALL SELECT version, state FROM objects"
    " WHERE endpoint = %(endpoint)s AND object_type = %(type)s AND object_id = %(id)s"
    " AND NOT EXISTS (SELECT FROM offered) AND " + _MINE
))
# The mark re-checks the claim, and the attempt's row exists only if the mark happened:
# RETURNING says whether it did.
MARK = Statement("mark", (
    "WITH marked AS (UPDATE events SET status = %(status)s, status_at = %(now)s, processed_at = %(now)s,"
    " last_error = NULL, last_traceback = NULL, object_type = coalesce(%(type)s, object_type),"
    " object_id = coalesce(%(id)s, object_id), object_version = coalesce(%(version)s, object_version)"
    f" WHERE endpoint = %(endpoint)s AND event_id = %(event_id)s AND status = {PROCESSING}"
    " AND attempts = %(attempt)s RETURNING endpoint, event_id, attempts)"
    " INSERT INTO attempts (endpoint, event_id, number, started_at, finished_at, status)"
    " SELECT endpoint, event_id, attempts, %(started)s::timestamptz, %(now)s, %(status)s FROM marked"
    " RETURNING number"
))
STATEMENTS = (CLAIM, LOCK_ROW, LOCK_OBJECT, READ_OBJECT, UPSERT, MARK)
Step = str | Statement
_prepared: weakref.WeakSet[Any] = weakref.WeakSet()  # the driver connections that have them


class Wire:
    """One event's connection: ``send`` runs statements in one round trip."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._driver: Any = connection.connection.driver_connection

    def send(self, *steps: Step, **params: Any) -> dict[Step, list[tuple[Any, ...]]]:
        """Run ``steps`` (one statement each) in order in one message; the rows of each that
        returns rows, by its step. A database error is raised as SQLAlchemy's (``DBAPIError``),
        as every other query's."""
        if self._driver not in _prepared:
            self._prepare()
        text = ";\n".join(s.execute if isinstance(s, Statement) else s for s in steps)
        fresh = self._driver.pgconn.transaction_status == IDLE
        try:
            return self._run(text, params, steps)
        except ProgrammingError as exc:
            # Deallocated under us (``DEALLOCATE ALL``, ``DISCARD ALL``): prepared again, the
            # message sent again if it began the transaction it failed in (nothing of it remains).
            if not (fresh and isinstance(exc.orig, InvalidSqlStatementName)):
                raise
        self.rollback()
        self._prepare()
        return self._run(text, params, steps)

    def _prepare(self) -> None:
        self._run(";\n".join(s.prepare for s in STATEMENTS), {})
        _prepared.add(self._driver)

    def _run(self, text: str, params: dict[str, Any], steps: tuple[Step, ...] = ()) -> dict[Step, list[Any]]:
        try:
            with psycopg.ClientCursor(self._driver) as cursor:
                cursor.execute(text, params)
                found: dict[Step, list[Any]] = {}
                for step in steps:
                    # The result's status, not ``description`` (which builds column objects).
                    if cursor.pgresult is not None and cursor.pgresult.status == TUPLES_OK:
                        found[step] = cursor.fetchall()
                    cursor.nextset()
                return found
        except psycopg.Error as exc:
            raise DBAPIError.instance(text, None, exc, psycopg.Error) from exc

    def claim(self, endpoint: str, event_id: str, now: datetime) -> Claimed | None:
        """received/queued/failed (or an abandoned processing) → processing, committed without
        waiting for the disk; the row claimed, or None if there is nothing to do."""
        rows = self.send(BEGIN, ASYNC_COMMIT, CLAIM, COMMIT, endpoint=endpoint, event_id=event_id, now=now)[CLAIM]
        return Claimed(*rows[0]) if rows else None

    def rollback(self) -> None:
        """End the open transaction, if any (after a failure, or a superseded claim)."""
        if not self._driver.closed:
            self._driver.rollback()

    @property
    def broken(self) -> bool:
        """The connection was lost (psycopg noticed it): not to be used again."""
        return bool(self._driver.broken or self._driver.closed)


def json_param(value: Any) -> Any:
    """``value`` as a ``jsonb`` parameter of ``Wire.send``."""
    return Jsonb(value)


class _Kept:
    """The connection a worker's loop keeps from one event to the next (``keep``)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.connection: Connection | None = None
        self.rested_at = 0.0

    def take(self) -> Connection:
        """The kept connection: pinged if it rested (as the pool does), replaced if it broke."""
        connection = self.connection
        if connection is not None and not connection.invalidated and not connection.closed:
            if time.monotonic() - self.rested_at < db.PING_IDLE:
                return connection
            dbapi = connection.connection.dbapi_connection
            try:
                if dbapi is not None and self.engine.dialect.do_ping(dbapi):
                    return connection
            except psycopg.Error:
                pass
            self.drop()
        self.connection = _autocommit(self.engine.connect())
        return self.connection

    def give_back(self, healthy: bool) -> None:
        self.rested_at = time.monotonic()
        if not healthy:
            self.drop()

    def drop(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None:
            connection.invalidate()  # the pool replaces it
            connection.close()


_kept: ContextVar[_Kept | None] = ContextVar("webhooks_kept_connection", default=None)


@contextmanager
def keep(engine: Engine) -> Iterator[None]:
    """Inside, this thread's events on ``engine`` share one connection (a worker's loop): no pool
    check-out, check-in and reset per event. Closed at the end."""
    kept = _Kept(engine)
    token = _kept.set(kept)
    try:
        yield
    finally:
        _kept.reset(token)
        if kept.connection is not None:
            kept.connection.close()


@contextmanager
def wire(engine: Engine) -> Iterator[Wire]:
    """A connection in autocommit for one event: the kept one inside ``keep``, else one from the
    pool; rolled back if a step left a transaction open, discarded if that fails."""
    kept = _kept.get()
    if kept is None or kept.engine is not engine:
        with engine.connect() as connection:
            w = Wire(_autocommit(connection))
            try:
                yield w
            finally:
                try:
                    w.rollback()
                except psycopg.Error:
                    connection.invalidate()  # broken: the pool replaces it
        return
    w = Wire(kept.take())
    try:
        yield w
    finally:
        healthy = False
        try:
            w.rollback()
            healthy = not w.broken
        except psycopg.Error:
            pass  # broken: replaced at the next event
        kept.give_back(healthy)


def _autocommit(connection: Connection) -> Connection:
    connection.execution_options(isolation_level="AUTOCOMMIT")
    return connection


def process(rt: runtime.Runtime, wire: Wire, claimed: Claimed, started_at: datetime) -> str:
    """PostgreSQL, after the claim: one round trip to lock the row and the object and apply the
    state, the handlers, then one to mark the row and commit; without handlers these are one."""
    data, ref = prepare(claimed, rt.settings)
    endpoint, event_id, attempt = claimed.endpoint, claimed.event_id, claimed.attempts
    found = handlers.handlers_for(endpoint, claimed.kind, claimed.event_type, rt.settings.handler_modules)
    status = Status.PROCESSED if ref is not None or found else Status.IGNORED
    params: dict[str, Any] = {
        "endpoint": endpoint, "event_id": event_id, "attempt": attempt,
        "status": status.value, "started": started_at, "now": datetime.now(UTC), "type": None, "id": None,
        "version": None,
    }
    lock: list[Step] = [BEGIN, LOCK_ROW]
    if ref is not None:
        params |= {"lock": json.dumps([endpoint, ref.type, ref.id]), "type": ref.type, "id": ref.id}
        lock.append(LOCK_OBJECT)
        latest = None
        fold = getattr(providers.get(claimed.kind), "fold", None)
        if fold is not None:  # merged with the stored state read under the object's lock
            got = wire.send(*lock, READ_OBJECT, **params)
            if not _ours(got, attempt):
                return "skipped"
            stored = got[READ_OBJECT]
            ref, latest = merge(fold, stored[0][0] if stored else None, ref)
            lock = []
        params |= {"version": ref.version, "state": json_param(ref.state),
                   "last": storable_key(latest or event_id, 255)}
        lock.append(UPSERT)
    if not found:  # nothing runs between the lock and the mark
        return status if wire.send(*lock, MARK, COMMIT, **params)[MARK] else "skipped"
    got = wire.send(*lock, **params)
    if LOCK_ROW in got and not _ours(got, attempt):
        return "skipped"  # a newer claim took over; it decides
    state: Any = None
    is_latest = True
    if ref is not None:
        [(version, state)] = got[UPSERT]
        is_latest = version == ref.version
    with rt.sessions(bind=wire.connection) as session:  # the handlers' writes join the transaction
        context = handlers.HandlerEvent(
            endpoint, claimed.kind, event_id, claimed.event_type, data, params["type"] or claimed.object_type,
            params["id"] or claimed.object_id, claimed.object_version if ref is None else ref.version, is_latest,
            attempt, session,
        )
        for handler in found:
            handlers.call(handler, context, state)
        session.flush()
        params["now"] = datetime.now(UTC)
        return status if wire.send(MARK, COMMIT, **params)[MARK] else "skipped"


def _ours(got: dict[Step, list[Any]], attempt: int) -> bool:
    """Whether the locked row is still processing under this claim."""
    rows = got[LOCK_ROW]
    return bool(rows) and rows[0][0] == Status.PROCESSING and rows[0][1] == attempt
