r"""A connection for processing's statements on PostgreSQL: several statements to a message,
prepared once per connection, and a worker's loop keeping one connection for its events.

A worker is bound by round trips, not by the statements they carry (``webhooks.store.postgres_worker``). Each
message is one simple query of plain SQL texts: psycopg's ``ClientCursor`` binds the parameters on
the client (libpq's quoting), PostgreSQL runs the statements in order, each with a snapshot of its
own, and stops at the first error. ``Statement``\ s are ``PREPARE``\ d once per connection and run by
``EXECUTE`` (planned once). The connection is in autocommit, so the messages open and close their
transactions themselves and psycopg adds no ``BEGIN`` round trip; a Session on the same connection
(the handlers') works inside the transaction a message left open.

Pooled connections have psycopg's own auto-prepare off (``webhooks.engines``): on a ROLLBACK it sends
``DEALLOCATE ALL``, which would drop these statements; a statement dropped anyway is prepared again.
"""

from __future__ import annotations

import re
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import psycopg
from psycopg.errors import InvalidSqlStatementName
from psycopg.pq import ExecStatus, TransactionStatus
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError, ProgrammingError

from webhooks import engines as db

TUPLES_OK = ExecStatus.TUPLES_OK
IDLE = TransactionStatus.IDLE
BEGIN = "BEGIN"
COMMIT = "COMMIT"


class Statement:
    """A statement prepared once per connection (``PREPARE``) and run by name (``EXECUTE``): the
    server plans it once, not in every message. Written with named parameters, as psycopg's."""

    def __init__(self, name: str, text: str) -> None:
        names = list(dict.fromkeys(_PARAM.findall(text)))
        self.name = f"webhooks_{name}"
        self.prepare = f"PREPARE {self.name} AS " + _PARAM.sub(lambda m: f"${names.index(m[1]) + 1}", text)
        self.execute = f"EXECUTE {self.name}({', '.join(f'%({n})s' for n in names)})"
        STATEMENTS.append(self)


STATEMENTS: list[Statement] = []  # every statement, prepared together on each connection
_PARAM = re.compile(r"%\((\w+)\)s")
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

    def rollback(self) -> None:
        """End the open transaction, if any (a superseded claim, before preparing again)."""
        if not self._driver.closed:
            self._driver.rollback()

    def end(self) -> bool:
        """End whatever transaction a step left open (after a failure too); whether the
        connection is still fit to use (a lost one raises nothing here: it is discarded)."""
        try:
            self.rollback()
        except psycopg.Error:
            return False
        return not (self._driver.broken or self._driver.closed)


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
            if db.alive(self.engine, connection.connection.dbapi_connection, self.rested_at):
                return connection
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
    check-out, check-in and reset per event. Closed at the end. Inside another ``keep`` of the
    same engine (one event inside a worker's loop) it keeps that one."""
    outer = _kept.get()
    if outer is not None and outer.engine is engine:
        yield
        return
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
                if not w.end():
                    connection.invalidate()  # the pool replaces it
        return
    w = Wire(kept.take())
    try:
        yield w
    finally:
        kept.give_back(w.end())  # a broken one is replaced at the next event


def _autocommit(connection: Connection) -> Connection:
    connection.execution_options(isolation_level="AUTOCOMMIT")
    return connection
