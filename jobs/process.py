"""``process_event(endpoint, event_id)``: the RQ job that acts on one stored event.

Claim the row (committed, so a worker that dies still counts an attempt), then in one transaction:
lock the row and check the claim is still ours, find the object and its version, serialize per
object, apply the state only when newer, run the handlers, mark the row and add the attempt's
history row — so a failure leaves nothing half done. Two commits per event, one of which waits
for the disk: the claim's commit does not wait for its WAL flush (it is bookkeeping: a crash
before the processing commit, which flushes it too, loses only the claim, and the sweeper requeues
the row), and the claim returns the row the provider's API call needs. On PostgreSQL
(``_on_postgres``) this is three messages on one connection: the claim, the locks with the state
applied, the mark with its commit (``jobs.postgres``); two when no handler runs in between.
Errors are recorded on the row and re-raised for RQ to retry; after the last try the row is
``failed``.

Exactly once in effect: the claim's attempt number is a token. Two jobs of one event (a replay, a
sweeper recovering a job it believes dead) serialize on the row lock, and only the holder of the
latest claim may mark the row; a row already ``processed`` is never claimed again. While the
transaction runs the row stays locked, which is how the sweeper tells a live ``processing`` row
from one stranded by a killed worker (``FOR UPDATE SKIP LOCKED``; on SQLite the write lock).
Per object, the advisory lock (and the ``objects`` row lock taken by the upsert) serialize events.

On SQLite the handlers must not run inside the write lock (every delivery and console read would
wait for them), so there (``_process_unlocked``): the claim, a read of the row and the object,
the handlers in a deferred transaction (it takes the write lock only if a handler writes), then
the state and the mark in a short write that re-checks the claim — in the handlers' transaction
when they wrote (it holds the lock already), else in a fresh one. A handler that read, then wrote
after another writer committed, gets SQLite's busy error: the attempt is rolled back and run
again the old way, inside the write lock. The runtime's processing lock, held from the claim to
the mark, serializes processing (per-object order) and tells the sweeper no job is live.

Provider APIs (``jobs.fetch``: Stripe re-fetch, PayPal's copy) are called after the claim and
before any lock: from the row as claimed, before the lock step (SQLite: before the write
transaction). A provider whose
object state is a fold of its events (Adyen payments: ``fold``) merges under the object lock
(SQLite: inside the write transaction that applies it), so the fold sees every earlier event.

Hostile values (``storable``): an object type or id that does not fit its key column or holds
NUL / lone surrogates is keyed ``sha256:<hex>`` of it; the stored state has NUL and lone
surrogates replaced by U+FFFD (and NaN/Infinity by null). The event's raw payload stays exact, and
handlers get its data as sent; ``state``, ``object_type`` and ``object_id`` are the stored ones.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import traceback
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from rq import get_current_job
from sqlalchemy import bindparam, select, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from webhooks import metrics, providers, runtime
from webhooks.config import Settings
from webhooks.db import is_busy, storable_json, storable_key, storable_text, upsert
from webhooks.jobs import attempts, fetch, handlers, postgres
from webhooks.models import Event, Object
from webhooks.providers.base import ObjectRef
from webhooks.words import CLAIMABLE, Status

log = logging.getLogger(__name__)
TRACEBACK_LIMIT = 8000
BIGINT = 2**63 - 1


def storable(ref: ObjectRef) -> ObjectRef:
    """The object key, version and state as both databases store them (see the module's doc)."""
    return ObjectRef(
        storable_key(ref.type, 100), storable_key(ref.id, 255),
        max(-BIGINT, min(BIGINT, ref.version)), storable_json(ref.state),
    )


# The statements every event runs, built once (building them cost more than running them).
_CLAIM = (
    update(Event)
    .where(Event.endpoint == bindparam("b_endpoint"), Event.event_id == bindparam("b_event_id"),
           Event.status.in_(CLAIMABLE))
    .values(status=Status.PROCESSING, attempts=Event.attempts + 1, status_at=bindparam("b_now"))
    .returning(Event)
)
_MINE = (
    select(Event)
    .where(Event.endpoint == bindparam("b_endpoint"), Event.event_id == bindparam("b_event_id"),
           Event.status == Status.PROCESSING, Event.attempts == bindparam("b_attempt"))
    .with_for_update()
)
_OBJECT = select(Object).where(
    Object.endpoint == bindparam("b_endpoint"), Object.object_type == bindparam("b_type"),
    Object.object_id == bindparam("b_id"),
)
_UPSERTS: dict[str, Any] = {}  # per dialect: apply_state's conditional upsert
_FRESH = {"populate_existing": True}


def _claim(session: Session, endpoint: str, event_id: str) -> Event | None:
    """received/queued/failed (or an abandoned processing) → processing; returns the claimed row
    (its ``attempts`` is the claim's token), or None if there is nothing to do."""
    params = {"b_endpoint": endpoint, "b_event_id": event_id, "b_now": datetime.now(UTC)}
    # Nothing is loaded in the session yet: no in-session objects to synchronize.
    return session.scalars(_CLAIM, params, execution_options={**_FRESH, "synchronize_session": False}).first()


def _mine(session: Session, endpoint: str, event_id: str, attempt: int) -> Event | None:
    """Lock the row for this transaction; None when another claim has superseded ours."""
    params = {"b_endpoint": endpoint, "b_event_id": event_id, "b_attempt": attempt}
    return session.scalars(_MINE, params, execution_options=_FRESH).first()


def _folded(session: Session, endpoint: str, kind: str, ref: ObjectRef) -> tuple[ObjectRef, str | None]:
    """``ref`` merged into the stored state when the provider folds its events (else unchanged),
    and the id of the event the fold names as its latest."""
    fold = getattr(providers.get(kind), "fold", None)
    if fold is None:
        return ref, None
    stored = session.get(Object, (endpoint, ref.type, ref.id), populate_existing=True)
    return _merge(fold, None if stored is None else stored.state, ref)


def _merge(fold: Any, stored: Any, ref: ObjectRef) -> tuple[ObjectRef, str | None]:
    """A folding provider's ``ref`` merged into the ``stored`` state, and the id of the event the
    fold names as its latest."""
    merged: ObjectRef = storable(fold(stored, ref))
    latest = merged.state.get("latest") if isinstance(merged.state, dict) else None
    return merged, latest if isinstance(latest, str) else None


def apply_state(session: Session, endpoint: str, event_id: str, ref: ObjectRef,
                kind: str | None = None) -> tuple[Object, ObjectRef]:
    """Conditional upsert: the stored state moves only to a strictly newer version; returns the
    stored object and the state offered. With ``kind`` a folding provider's state is merged
    first (the caller holds the object's lock)."""
    latest = None
    if kind is not None:
        ref, latest = _folded(session, endpoint, kind, ref)
    key = {"b_endpoint": endpoint, "b_type": ref.type, "b_id": ref.id}
    values = {"b_version": ref.version, "b_state": ref.state, "b_now": datetime.now(UTC),
              "b_last": storable_key(latest or event_id, 255)}
    # The row written comes back; nothing comes back when a newer version is stored: read it.
    current = session.scalars(_upsert(session), key | values, execution_options=_FRESH).first()
    if current is None:
        current = session.scalars(_OBJECT, key, execution_options=_FRESH).one()
    return current, ref


def _upsert(session: Session) -> Any:
    """``apply_state``'s statement for the session's database, built on first use."""
    name = session.get_bind().dialect.name
    stmt = _UPSERTS.get(name)
    if stmt is None:
        insert = upsert(session, Object).values(
            endpoint=bindparam("b_endpoint"), object_type=bindparam("b_type"), object_id=bindparam("b_id"),
            version=bindparam("b_version"), state=bindparam("b_state"), last_event_id=bindparam("b_last"),
            updated_at=bindparam("b_now"),
        )
        stmt = _UPSERTS[name] = insert.on_conflict_do_update(
            index_elements=["endpoint", "object_type", "object_id"],
            set_={k: insert.excluded[k] for k in ("version", "state", "last_event_id", "updated_at")},
            where=Object.version < insert.excluded.version,
        ).returning(Object)
    return stmt


Prepared = tuple[Any, ObjectRef | None]


def _object(event: Event | postgres.Claimed, settings: Settings) -> Prepared:
    """The event's data and the object it moves, as handlers must see them (re-fetched from the
    provider's API when configured: called holding no database lock), storable."""
    provider = providers.get(event.kind)
    data = provider.event_data(event.payload, event.item_index)
    ref = provider.extract(event.event_type, data)
    data, ref = fetch.current(provider, settings.endpoints.get(event.endpoint), event.event_type, data, ref)
    return data, None if ref is None else storable(ref)


def _run(session: Session, event: Event, settings: Settings, prepared: Prepared) -> str:
    data, ref = prepared
    state: Any = None
    latest = True
    if ref is not None:
        current, ref = apply_state(session, event.endpoint, event.event_id, ref, event.kind)
        state, latest = current.state, current.version == ref.version
        event.object_type, event.object_id, event.object_version = ref.type, ref.id, ref.version
    found = handlers.handlers_for(event.endpoint, event.kind, event.event_type, settings.handler_modules)
    context = handlers.HandlerEvent(
        event.endpoint, event.kind, event.event_id, event.event_type, data,
        event.object_type, event.object_id, event.object_version, latest, event.attempts, session,
    )
    for handler in found:
        handlers.call(handler, context, state)
    return Status.PROCESSED if ref is not None or found else Status.IGNORED


def _mark(session: Session, event: Event, status: str, started_at: datetime) -> None:
    """Mark the row done and add the attempt's history row, in the caller's transaction."""
    event.status, event.status_at = status, datetime.now(UTC)
    event.processed_at, event.last_error, event.last_traceback = datetime.now(UTC), None, None
    attempts.add(session, event.endpoint, event.event_id, event.attempts, started_at, status)


def _process_locked(rt: runtime.Runtime, claimed: Event, started_at: datetime, prepared: Prepared) -> str:
    """SQLite, when the unlocked path met a busy database: one transaction holding the write lock
    throughout (the provider's API, if any, was called before it)."""
    with rt.sessions.begin() as session:
        event = _mine(session, claimed.endpoint, claimed.event_id, claimed.attempts)
        if event is None:
            return "skipped"  # a newer claim took over; it decides
        status = _run(session, event, rt.settings, prepared)
        _mark(session, event, status, started_at)
    return status


def _finish(session: Session, endpoint: str, event_id: str, attempt: int, ref: ObjectRef | None,
            status: str, started_at: datetime) -> bool:
    """Apply the state and mark the row, if the claim is still ours."""
    event = _mine(session, endpoint, event_id, attempt)
    if event is None:
        return False
    if ref is not None:
        _, ref = apply_state(session, endpoint, event_id, ref, event.kind)
        event.object_type, event.object_id, event.object_version = ref.type, ref.id, ref.version
    _mark(session, event, status, started_at)
    return True


class _Superseded(Exception):
    """A newer claim took over while the handlers ran: their writes roll back."""


def _changes(session: Session) -> int:
    dbapi: Any = session.connection().connection.dbapi_connection
    return int(dbapi.total_changes)


def _process_unlocked(rt: runtime.Runtime, claimed: Event, started_at: datetime) -> str:
    """SQLite: the handlers run without holding the write lock (see the module's doc)."""
    endpoint, event_id, attempt = claimed.endpoint, claimed.event_id, claimed.attempts
    with rt.deferred_sessions() as session:
        with session.begin():
            event = _mine(session, endpoint, event_id, attempt)
        if event is None:
            return "skipped"
        session.expunge(event)  # read only: nothing of it is flushed with the handlers' writes
        prepared = data, ref = _object(event, rt.settings)
        state: Any = None
        latest = True
        if ref is not None:
            with session.begin():
                view, _ = _folded(session, endpoint, event.kind, ref)  # a fold's preview
                current = session.get(Object, (endpoint, ref.type, ref.id))
            if current is not None and current.version >= view.version:
                state, latest = current.state, current.version == view.version
            else:
                state = view.state
        found = handlers.handlers_for(endpoint, event.kind, event.event_type, rt.settings.handler_modules)
        status = Status.PROCESSED if ref is not None or found else Status.IGNORED
        context = handlers.HandlerEvent(
            endpoint, event.kind, event_id, event.event_type, data, ref.type if ref else event.object_type,
            ref.id if ref else event.object_id, ref.version if ref else event.object_version, latest, attempt,
            session,
        )
        try:
            with session.begin():
                before = _changes(session)  # BEGIN (deferred): no lock, no snapshot yet
                for handler in found:
                    handlers.call(handler, context, state)
                session.flush()
                wrote = _changes(session) != before
                # A handler that wrote holds the write lock: the mark joins its writes.
                if wrote and not _finish(session, endpoint, event_id, attempt, ref, status, started_at):
                    raise _Superseded
        except _Superseded:
            return "skipped"
        except OperationalError as exc:
            if not is_busy(exc):
                raise
            return _process_locked(rt, claimed, started_at, prepared)
    if not wrote:
        with rt.sessions.begin() as session:
            if not _finish(session, endpoint, event_id, attempt, ref, status, started_at):
                return "skipped"
    return status


def _fail(rt: runtime.Runtime, endpoint: str, event_id: str, attempt: int, last_try: bool,
          started_at: datetime, exc: Exception) -> None:
    """Record the error on the row (if the claim is still ours) and in the attempt history."""
    error = storable_text(f"{exc.__class__.__name__}: {exc}")[:2000]
    trace = storable_text(traceback.format_exc()[-TRACEBACK_LIMIT:])
    with rt.sessions.begin() as session:
        session.execute(
            update(Event)
            .where(Event.endpoint == endpoint, Event.event_id == event_id,
                   Event.status == Status.PROCESSING, Event.attempts == attempt)
            .values(status=Status.FAILED if last_try else Status.QUEUED, status_at=datetime.now(UTC),
                    last_error=error, last_traceback=trace)
        )
    attempts.record(rt, endpoint, event_id, attempt, started_at, "error", error, trace)


def _on_postgres(rt: runtime.Runtime, wire: postgres.Wire, claimed: postgres.Claimed,
                 started_at: datetime) -> str:
    """PostgreSQL, after the claim: one round trip to lock the row and the object and apply the
    state, the handlers, then one to mark the row and commit; without handlers these are one."""
    data, ref = _object(claimed, rt.settings)
    endpoint, event_id, attempt = claimed.endpoint, claimed.event_id, claimed.attempts
    found = handlers.handlers_for(endpoint, claimed.kind, claimed.event_type, rt.settings.handler_modules)
    status = Status.PROCESSED if ref is not None or found else Status.IGNORED
    params: dict[str, Any] = {
        "endpoint": endpoint, "event_id": event_id, "attempt": attempt,
        "status": status.value, "started": started_at, "now": datetime.now(UTC), "type": None, "id": None,
        "version": None,
    }
    lock: list[postgres.Step] = [postgres.BEGIN, postgres.LOCK_ROW]
    if ref is not None:
        params |= {"lock": json.dumps([endpoint, ref.type, ref.id]), "type": ref.type, "id": ref.id}
        lock.append(postgres.LOCK_OBJECT)
        latest = None
        fold = getattr(providers.get(claimed.kind), "fold", None)
        if fold is not None:  # merged with the stored state read under the object's lock
            got = wire.send(*lock, postgres.READ_OBJECT, **params)
            if not _ours(got, attempt):
                return "skipped"
            stored = got[postgres.READ_OBJECT]
            ref, latest = _merge(fold, stored[0][0] if stored else None, ref)
            lock = []
        params |= {"version": ref.version, "state": postgres.json_param(ref.state),
                   "last": storable_key(latest or event_id, 255)}
        lock.append(postgres.UPSERT)
    if not found:  # nothing runs between the lock and the mark
        return status if wire.send(*lock, postgres.MARK, postgres.COMMIT, **params)[postgres.MARK] else "skipped"
    got = wire.send(*lock, **params)
    if postgres.LOCK_ROW in got and not _ours(got, attempt):
        return "skipped"  # a newer claim took over; it decides
    state: Any = None
    is_latest = True
    if ref is not None:
        [(version, state)] = got[postgres.UPSERT]
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
        return status if wire.send(postgres.MARK, postgres.COMMIT, **params)[postgres.MARK] else "skipped"


def _ours(got: dict[postgres.Step, list[Any]], attempt: int) -> bool:
    """Whether the locked row is still processing under this claim."""
    rows = got[postgres.LOCK_ROW]
    return bool(rows) and rows[0][0] == Status.PROCESSING and rows[0][1] == attempt


@contextlib.contextmanager
def _wire(rt: runtime.Runtime) -> Iterator[postgres.Wire | None]:
    """PostgreSQL: the event's connection (``jobs.postgres``); SQLite: None (the ORM path)."""
    if rt.engine.dialect.name != "postgresql":
        yield None
        return
    with postgres.wire(rt.engine) as wire:
        yield wire


def process_event(endpoint: str, event_id: str) -> str:
    """Process one event; returns the final status (or ``skipped`` when there was nothing to do)."""
    rt = runtime.current()
    job = get_current_job()
    last_try = job is None or not job.retries_left
    started_at, clock = datetime.now(UTC), time.monotonic()
    label = metrics.endpoint_label(rt, endpoint)
    with rt.processing(), _wire(rt) as wire:
        claimed: Event | postgres.Claimed | None
        if wire is not None:
            claimed = wire.claim(endpoint, event_id, datetime.now(UTC))
        else:
            with rt.sessions.begin() as session:
                claimed = _claim(session, endpoint, event_id)
        if claimed is None:
            return "skipped"
        attempt = claimed.attempts
        try:
            # After the claim: a handler module that cannot be imported is a recorded, counted
            # attempt (and in the end a failed event), never a job that retries unseen forever.
            handlers.load(rt.settings.handler_modules)
            if wire is not None:
                try:
                    status = _on_postgres(rt, wire, claimed, started_at)  # type: ignore[arg-type]
                finally:  # whatever happened, no transaction stays open (nor its row lock, which
                    wire.rollback()  # the failure's record below waits for)
            else:
                status = _process_unlocked(rt, claimed, started_at)  # type: ignore[arg-type]
        except fetch.MismatchError as exc:
            # Not the provider's event: no handler ran, and no retry can change that.
            _fail(rt, endpoint, event_id, attempt, True, started_at, exc)
            _measure(label, Status.FAILED, clock, event_id, attempt, exc)
            return Status.FAILED
        except Exception as exc:
            _fail(rt, endpoint, event_id, attempt, last_try, started_at, exc)
            _measure(label, Status.FAILED if last_try else "error", clock, event_id, attempt, exc)
            raise
    if status != "skipped":
        _measure(label, status, clock, event_id, attempt)
    return status


def _measure(endpoint: str, outcome: str, clock: float, event_id: str, attempt: int,
             exc: Exception | None = None) -> None:
    """Count the attempt and log its one line (never the payload or the error's message)."""
    duration = time.monotonic() - clock
    metrics.ATTEMPTS.labels(endpoint, outcome).inc()
    metrics.DURATION.labels(endpoint).observe(duration)
    fields = {"endpoint": endpoint, "event_id": event_id, "attempt": attempt, "outcome": outcome,
              "duration_ms": round(duration * 1000, 1), "error": exc.__class__.__name__ if exc else None}
    log.log(logging.WARNING if exc else logging.INFO, "attempt %s", outcome, extra={"fields": fields})
