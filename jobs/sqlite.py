"""Processing one event on SQLite, whose writers are serial: the handlers must not run inside the
write lock (every delivery and console read would wait for them).

The claim, a read of the row and the object, the handlers in a deferred transaction (it takes
the write lock only if a handler writes), then the state and the mark in a short write that
re-checks the claim — in the handlers' transaction when they wrote (it holds the lock already),
else in a fresh one. A handler that read, then wrote after another writer committed, gets
SQLite's busy error: the attempt is rolled back and run again the old way, inside the write lock
(``_process_locked``). The runtime's processing lock, held from the claim to the mark (by
``jobs.process``), serializes processing (per-object order) and tells the sweeper no job is live.
A folding provider's state is merged inside the write transaction that applies it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from webhooks import handlers, providers, runtime
from webhooks.config import Settings
from webhooks.db import is_busy, storable_key, upsert
from webhooks.models import Event, Object
from webhooks.providers.base import ObjectRef
from webhooks.words import CLAIMABLE, Status

from . import attempts
from .objects import Prepared, merge, prepare

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


def claim(session: Session, endpoint: str, event_id: str) -> Event | None:
    """received/queued/failed (or an abandoned processing) → processing; returns the claimed row
    (its ``attempts`` is the claim's token), or None if there is nothing to do."""
    params = {"b_endpoint": endpoint, "b_event_id": event_id, "b_now": datetime.now(UTC)}
    # Nothing is loaded in the session yet: no in-session objects to synchronize.
    return session.scalars(_CLAIM, params, execution_options={**_FRESH, "synchronize_session": False}).first()


def mine(session: Session, endpoint: str, event_id: str, attempt: int) -> Event | None:
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
    return merge(fold, None if stored is None else stored.state, ref)


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


def _run(session: Session, event: Event, settings: Settings, prepared: Prepared) -> tuple[str, list[str]]:
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
    return Status.PROCESSED if ref is not None or found else Status.IGNORED, handlers.names(found)


def _mark(session: Session, event: Event, status: str, started_at: datetime, ran: list[str]) -> None:
    """Mark the row done and add the attempt's history row, in the caller's transaction."""
    event.status, event.status_at = status, datetime.now(UTC)
    event.processed_at, event.last_error, event.last_traceback = datetime.now(UTC), None, None
    attempts.add(session, event.endpoint, event.event_id, event.attempts, started_at, status, ran)


def _process_locked(rt: runtime.Runtime, claimed: Event, started_at: datetime, prepared: Prepared) -> str:
    """SQLite, when the unlocked path met a busy database: one transaction holding the write lock
    throughout (the provider's API, if any, was called before it)."""
    with rt.sessions.begin() as session:
        event = mine(session, claimed.endpoint, claimed.event_id, claimed.attempts)
        if event is None:
            return "skipped"  # a newer claim took over; it decides
        status, ran = _run(session, event, rt.settings, prepared)
        _mark(session, event, status, started_at, ran)
    return status


def _finish(session: Session, endpoint: str, event_id: str, attempt: int, ref: ObjectRef | None,
            status: str, started_at: datetime, ran: list[str]) -> bool:
    """Apply the state and mark the row, if the claim is still ours."""
    event = mine(session, endpoint, event_id, attempt)
    if event is None:
        return False
    if ref is not None:
        _, ref = apply_state(session, endpoint, event_id, ref, event.kind)
        event.object_type, event.object_id, event.object_version = ref.type, ref.id, ref.version
    _mark(session, event, status, started_at, ran)
    return True


class _Superseded(Exception):
    """A newer claim took over while the handlers ran: their writes roll back."""


def _changes(session: Session) -> int:
    dbapi: Any = session.connection().connection.dbapi_connection
    return int(dbapi.total_changes)


def process(rt: runtime.Runtime, claimed: Event, started_at: datetime) -> str:
    """The handlers run without holding the write lock (see the module's doc)."""
    endpoint, event_id, attempt = claimed.endpoint, claimed.event_id, claimed.attempts
    with rt.deferred_sessions() as session:
        with session.begin():
            event = mine(session, endpoint, event_id, attempt)
        if event is None:
            return "skipped"
        session.expunge(event)  # read only: nothing of it is flushed with the handlers' writes
        prepared = data, ref = prepare(event, rt.settings)
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
        ran = handlers.names(found)
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
                if wrote and not _finish(session, endpoint, event_id, attempt, ref, status, started_at, ran):
                    raise _Superseded
        except _Superseded:
            return "skipped"
        except OperationalError as exc:
            if not is_busy(exc):
                raise
            return _process_locked(rt, claimed, started_at, prepared)
    if not wrote:
        with rt.sessions.begin() as session:
            if not _finish(session, endpoint, event_id, attempt, ref, status, started_at, ran):
                return "skipped"
    return status
