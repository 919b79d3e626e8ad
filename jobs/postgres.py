"""Processing one event on PostgreSQL (``process``, after ``claim``), in three round trips.

A worker is bound by round trips, not by the statements they carry: on the 2-core machine of
``benchmarks/README.md`` one costs ≈ 0.2 ms of wall time and ≈ 0.13 ms of the worker's CPU, and
processing an event through SQLAlchemy's ORM took about thirteen (pool ping, ``BEGIN``, each
statement, ``COMMIT``, twice). Here each step is one message of several statements, prepared once
per connection (``jobs.pgwire``):

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
from datetime import UTC, datetime
from typing import Any, NamedTuple

from psycopg.types.json import Jsonb

from webhooks import handlers, providers, runtime
from webhooks.db import storable_key
from webhooks.words import CLAIMABLE, Status

from .objects import merge, prepare
from .pgwire import BEGIN, COMMIT, Statement, Step, Wire

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
    body_digest: str | None
    object_type: str | None
    object_id: str | None
    object_version: int | None


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
    " INSERT INTO attempts (endpoint, event_id, number, started_at, finished_at, status, handlers)"
    " SELECT endpoint, event_id, attempts, %(started)s::timestamptz, %(now)s, %(status)s, %(handlers)s::jsonb"
    " FROM marked"
    " RETURNING number"
))


def claim(wire: Wire, endpoint: str, event_id: str, now: datetime) -> Claimed | None:
    """received/queued/failed (or an abandoned processing) → processing, committed without
    waiting for the disk; the row claimed, or None if there is nothing to do."""
    rows = wire.send(BEGIN, ASYNC_COMMIT, CLAIM, COMMIT, endpoint=endpoint, event_id=event_id, now=now)[CLAIM]
    return Claimed(*rows[0]) if rows else None


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
        "version": None, "handlers": Jsonb(handlers.names(found)),
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
        params |= {"version": ref.version, "state": Jsonb(ref.state),
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
