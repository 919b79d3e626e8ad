"""Processing one event on PostgreSQL (``process``, after ``claim``), in three round trips.

A worker is bound by round trips, not by the statements they carry: on the 2-core machine of
``benchmarks/README.md`` one costs ≈ 0.2 ms of wall time and ≈ 0.13 ms of the worker's CPU, and
processing an event through SQLAlchemy's ORM took about thirteen (pool ping, ``BEGIN``, each
statement, ``COMMIT``, twice). Here each step is one message of several statements, prepared once
per connection (``webhooks.store.pgwire``):

- claim: ``BEGIN; SET LOCAL synchronous_commit TO off; UPDATE … RETURNING; COMMIT`` (its lease,
  ``claimed_until``, written with the status)
- lock: ``BEGIN``; the event row ``FOR UPDATE``; the object's advisory lock; the conditional
  upsert, returning the stored version and state (the offered row, or the newer one kept)
- mark, after the handlers: the event row and its attempt's row in one statement; ``COMMIT``

Without handlers nothing runs between lock and mark, so they are one message. A folding provider
(Adyen) reads the stored state in the lock step and upserts the merged state in a message of its
own. The upsert and the mark re-check the claim, so a superseded claim changes nothing.

The SQL is written from the table definitions (``Event.__table__``, ``Object.__table__``,
``Attempt.__table__``: a renamed column fails at import) and the status words from the moves of
``webhooks.store.transitions``; parameters are named after the columns they fill.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from psycopg.types.json import Jsonb
from sqlalchemy import Column, String, Table
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session, sessionmaker

from webhooks.storable import storable_key
from webhooks.store.base import Claimed, Seen, Work
from webhooks.store.pgwire import BEGIN, COMMIT, Statement, Step, Wire
from webhooks.store.sql import CLAIMED, EVENTS
from webhooks.store.transitions import CLAIM, MARK, Move, values
from webhooks.tables.events import Attempt, Object
from webhooks.vocabulary import Status

OBJECTS: Table = Object.__table__  # type: ignore[assignment]  # a Table (mypy sees a FromClause)
ATTEMPTS: Table = Attempt.__table__  # type: ignore[assignment]
_PG: Any = postgresql.dialect()  # type: ignore[no-untyped-call]


def _names(columns: Iterable[Any]) -> str:
    return ", ".join(c.name for c in columns)


def _key(table: Table) -> str:
    """The primary key's condition, each column's parameter named after it."""
    return " AND ".join(f"{c.name} = %({c.name})s" for c in table.primary_key)


def _sources(move: Move) -> str:
    """The statuses ``move`` applies from, as SQL literals (the words of ``webhooks.vocabulary``)."""
    return ", ".join("'" + str(s).replace("'", "''") + "'" for s in move.sources)


def _cast(column: Column[Any]) -> str:
    """A parameter of ``column``'s type (text for strings: an explicit varchar(n) cast truncates)."""
    return f"%({column.name})s::" + ("text" if isinstance(column.type, String) else column.type.compile(_PG))


def _moved(move: Move, to: Status, now: datetime, until: datetime | None = None) -> dict[str, object]:
    """``transitions.values`` as this module's parameters (``status``, ``status_at``; a claim's
    ``claimed_until``)."""
    return {k: str(v) if isinstance(v, Status) else v for k, v in values(move, to, now, until).items()}


ASYNC_COMMIT = "SET LOCAL synchronous_commit TO off"
CLAIM_ROW = Statement(
    "claim",
    (
        f"UPDATE {EVENTS.name} SET status = %(status)s, attempts = attempts + 1, status_at = %(status_at)s,"
        f" {EVENTS.c.claimed_until.name} = %(claimed_until)s"
        f" WHERE {_key(EVENTS)} AND status IN ({_sources(CLAIM)}) RETURNING {_names(CLAIMED)}"
    ),
)
# The row as it is now (FOR UPDATE reads the latest committed version): ours while it is still
# processing under our claim's attempt number.
LOCK_ROW = Statement("lock_row", f"SELECT status, attempts FROM {EVENTS.name} WHERE {_key(EVENTS)} FOR UPDATE")
LOCK_OBJECT = Statement("lock_object", "SELECT pg_advisory_xact_lock(hashtextextended(%(lock)s, 0))")
READ_OBJECT = Statement("read_object", f"SELECT state FROM {OBJECTS.name} WHERE {_key(OBJECTS)}")
# The claim is still ours (after LOCK_ROW, which waited for any other holder of the row).
_MINE = (
    f"EXISTS (SELECT FROM {EVENTS.name} WHERE {_key(EVENTS)} AND status IN ({_sources(MARK)})"
    " AND attempts = %(attempt)s)"
)
_KEPT = [c for c in OBJECTS.c if not c.primary_key]  # what a newer version replaces
# The stored state moves only to a strictly newer version; either way the stored row comes back
# (the second branch's snapshot is taken after the advisory lock: no writer of it is in flight).
# Nothing is written or returned if the claim is no longer ours.
UPSERT = Statement(
    "upsert",
    (
        f"WITH offered AS (INSERT INTO {OBJECTS.name} ({_names(OBJECTS.c)})"
        f" SELECT {', '.join(_cast(c) for c in OBJECTS.c)} WHERE {_MINE}"
        f" ON CONFLICT ({_names(OBJECTS.primary_key)}) DO UPDATE SET"
        f" {', '.join(f'{c.name} = excluded.{c.name}' for c in _KEPT)}"
        f" WHERE {OBJECTS.name}.version < excluded.version RETURNING version, state)"
        f" SELECT version, state FROM offered UNION ALL SELECT version, state FROM {OBJECTS.name}"
        f" WHERE {_key(OBJECTS)} AND NOT EXISTS (SELECT FROM offered) AND {_MINE}"
    ),
)
# The attempt's row, from the marked event's: its column → the value it gets.
_ATTEMPT = {
    ATTEMPTS.c.endpoint: "endpoint",
    ATTEMPTS.c.event_id: "event_id",
    ATTEMPTS.c.number: "attempts",
    ATTEMPTS.c.started_at: _cast(ATTEMPTS.c.started_at),
    ATTEMPTS.c.finished_at: "%(status_at)s",
    ATTEMPTS.c.status: "%(status)s",
    ATTEMPTS.c.handlers: _cast(ATTEMPTS.c.handlers),
}
_OBJECT_OF_EVENT = ("object_type", "object_id", "object_version")  # events' columns, kept when NULL
# The mark re-checks the claim, and the attempt's row exists only if the mark happened:
# RETURNING says whether it did.
MARK_ROW = Statement(
    "mark",
    (
        f"WITH marked AS (UPDATE {EVENTS.name} SET status = %(status)s, status_at = %(status_at)s,"
        " processed_at = %(status_at)s, last_error = NULL, last_traceback = NULL, "
        + ", ".join(f"{EVENTS.c[n].name} = coalesce(%({n})s, {n})" for n in _OBJECT_OF_EVENT)
        + f" WHERE {_key(EVENTS)} AND status IN ({_sources(MARK)}) AND attempts = %(attempt)s"
        f" RETURNING {_names(EVENTS.primary_key)}, attempts)"
        f" INSERT INTO {ATTEMPTS.name} ({_names(_ATTEMPT)}) SELECT {', '.join(_ATTEMPT.values())} FROM marked"
        " RETURNING number"
    ),
)


def claim(wire: Wire, endpoint: str, event_id: str, now: datetime, until: datetime) -> Claimed | None:
    """received/queued/failed (or an abandoned processing) → processing, leased ``until``,
    committed without waiting for the disk; the row claimed, or None if there is nothing to do."""
    params = {"endpoint": endpoint, "event_id": event_id, **_moved(CLAIM, Status.PROCESSING, now, until)}
    rows = wire.send(BEGIN, ASYNC_COMMIT, CLAIM_ROW, COMMIT, **params)[CLAIM_ROW]
    return Claimed(*rows[0]) if rows else None


def process(sessions: sessionmaker[Session], wire: Wire, claimed: Claimed, work: Work, started_at: datetime) -> str:
    """PostgreSQL, after the claim: one round trip to lock the row and the object and apply the
    state, the handlers, then one to mark the row and commit; without handlers these are one."""
    data, ref = work.prepare()
    endpoint, event_id, attempt = claimed.endpoint, claimed.event_id, claimed.attempts
    status = Status.PROCESSED if ref is not None or work.handlers else Status.IGNORED
    params: dict[str, Any] = {
        "endpoint": endpoint,
        "event_id": event_id,
        "attempt": attempt,
        "started_at": started_at,
        **_moved(MARK, status, datetime.now(UTC)),
        "object_type": None,
        "object_id": None,
        "object_version": None,
        "handlers": Jsonb(work.handlers),
    }
    lock: list[Step] = [BEGIN, LOCK_ROW]
    if ref is not None:
        params |= {"lock": json.dumps([endpoint, ref.type, ref.id]), "object_type": ref.type, "object_id": ref.id}
        lock.append(LOCK_OBJECT)
        latest = None
        if work.fold is not None:  # merged with the stored state read under the object's lock
            got = wire.send(*lock, READ_OBJECT, **params)
            if not _ours(got, attempt):
                return "skipped"
            stored = got[READ_OBJECT]
            ref, latest = work.fold(stored[0][0] if stored else None, ref)
            lock = []
        params |= {
            "version": ref.version,
            "object_version": ref.version,
            "state": Jsonb(ref.state),
            "last_event_id": storable_key(latest or event_id, 255),
            "updated_at": params["status_at"],
        }
        lock.append(UPSERT)
    if not work.handlers:  # nothing runs between the lock and the mark
        return status if wire.send(*lock, MARK_ROW, COMMIT, **params)[MARK_ROW] else "skipped"
    got = wire.send(*lock, **params)
    if LOCK_ROW in got and not _ours(got, attempt):
        return "skipped"  # a newer claim took over; it decides
    state: Any = None
    is_latest = True
    if ref is not None:
        [(version, state)] = got[UPSERT]
        is_latest = version == ref.version
    with sessions(bind=wire.connection) as session:  # the handlers' writes join the transaction
        work.run(
            Seen(
                data,
                params["object_type"] or claimed.object_type,
                params["object_id"] or claimed.object_id,
                claimed.object_version if ref is None else ref.version,
                is_latest,
                state,
                session,
            )
        )
        session.flush()
        params["status_at"] = datetime.now(UTC)
        return status if wire.send(MARK_ROW, COMMIT, **params)[MARK_ROW] else "skipped"


def _ours(got: dict[Step, list[Any]], attempt: int) -> bool:
    """Whether the locked row is still processing under this claim."""
    rows = got[LOCK_ROW]
    return bool(rows) and rows[0][0] in MARK.sources and rows[0][1] == attempt
