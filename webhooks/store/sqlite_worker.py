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
from sqlalchemy.orm import Session, sessionmaker

from webhooks.engines import is_busy, upsert
from webhooks.providers.base import ObjectRef
from webhooks.storable import storable_key
from webhooks.store import attempts
from webhooks.store.base import Claimed, Fold, Prepared, Seen, Work
from webhooks.store.sql import CLAIMED, bound, under_claim
from webhooks.store.transitions import CLAIM, MARK, values
from webhooks.tables.events import Event, Object
from webhooks.vocabulary import Status

# The statements every event runs, built once (building them cost more than running them).
_CLAIM = (
    update(Event)
    .where(
        Event.endpoint == bindparam("b_endpoint"),
        Event.event_id == bindparam("b_event_id"),
        Event.status.in_(CLAIM.sources),
    )
    .values(
        status=bindparam("b_status"),
        attempts=Event.attempts + 1,
        status_at=bindparam("b_status_at"),
        claimed_until=bindparam("b_claimed_until"),
    )
    .returning(*CLAIMED)
)
_MINE = select(Event).where(*under_claim(MARK)).with_for_update()
_OBJECT = select(Object).where(
    Object.endpoint == bindparam("b_endpoint"),
    Object.object_type == bindparam("b_type"),
    Object.object_id == bindparam("b_id"),
)
_UPSERTS: dict[str, Any] = {}  # per dialect: apply_state's conditional upsert
_FRESH = {"populate_existing": True}


def claim(session: Session, endpoint: str, event_id: str, now: datetime, until: datetime) -> Claimed | None:
    """received/queued/failed (or an abandoned processing) → processing, leased ``until``; returns
    the claimed row (its ``attempts`` is the claim's token), or None if there is nothing to do."""
    moved = values(CLAIM, Status.PROCESSING, now, until)
    params = {"b_endpoint": endpoint, "b_event_id": event_id, **bound(moved)}
    row = session.execute(_CLAIM, params).first()
    return None if row is None else Claimed(*row)


def mine(session: Session, endpoint: str, event_id: str, attempt: int) -> Event | None:
    """Lock the row for this transaction; None when another claim has superseded ours."""
    params = {"b_endpoint": endpoint, "b_event_id": event_id, "b_attempt": attempt}
    return session.scalars(_MINE, params, execution_options=_FRESH).first()


def _folded(session: Session, endpoint: str, fold: Fold | None, ref: ObjectRef) -> tuple[ObjectRef, str | None]:
    """``ref`` merged into the stored state when the provider folds its events (else unchanged),
    and the id of the event the fold names as its latest."""
    if fold is None:
        return ref, None
    stored = session.get(Object, (endpoint, ref.type, ref.id), populate_existing=True)
    return fold(None if stored is None else stored.state, ref)


def apply_state(
    session: Session, endpoint: str, event_id: str, ref: ObjectRef, fold: Fold | None = None
) -> tuple[Object, ObjectRef]:
    """Conditional upsert: the stored state moves only to a strictly newer version; returns the
    stored object and the state offered. With ``fold`` a folding provider's state is merged
    first (the caller holds the object's lock)."""
    ref, latest = _folded(session, endpoint, fold, ref)
    key = {"b_endpoint": endpoint, "b_type": ref.type, "b_id": ref.id}
    state = {
        "b_version": ref.version,
        "b_state": ref.state,
        "b_now": datetime.now(UTC),
        "b_last": storable_key(latest or event_id, 255),
    }
    # The row written comes back; nothing comes back when a newer version is stored: read it.
    current = session.scalars(_upsert(session), key | state, execution_options=_FRESH).first()
    if current is None:
        current = session.scalars(_OBJECT, key, execution_options=_FRESH).one()
    return current, ref


def _upsert(session: Session) -> Any:
    """``apply_state``'s statement for the session's database, built on first use."""
    name = session.get_bind().dialect.name
    stmt = _UPSERTS.get(name)
    if stmt is None:
        insert = upsert(session, Object).values(
            endpoint=bindparam("b_endpoint"),
            object_type=bindparam("b_type"),
            object_id=bindparam("b_id"),
            version=bindparam("b_version"),
            state=bindparam("b_state"),
            last_event_id=bindparam("b_last"),
            updated_at=bindparam("b_now"),
        )
        stmt = _UPSERTS[name] = insert.on_conflict_do_update(
            index_elements=[c.name for c in Object.__table__.primary_key],
            set_={k: insert.excluded[k] for k in ("version", "state", "last_event_id", "updated_at")},
            where=Object.version < insert.excluded.version,
        ).returning(Object)
    return stmt


def _status(work: Work, ref: ObjectRef | None) -> Status:
    return Status.PROCESSED if ref is not None or work.handlers else Status.IGNORED


def _run(session: Session, event: Event, work: Work, prepared: Prepared) -> Status:
    data, ref = prepared
    state: Any = None
    latest = True
    status = _status(work, ref)
    if ref is not None:
        current, ref = apply_state(session, event.endpoint, event.event_id, ref, work.fold)
        state, latest = current.state, current.version == ref.version
        event.object_type, event.object_id, event.object_version = ref.type, ref.id, ref.version
    if work.handlers:
        work.run(Seen(data, event.object_type, event.object_id, event.object_version, latest, state, session))
    return status


def _mark(session: Session, event: Event, status: Status, started_at: datetime, ran: list[str]) -> None:
    """Mark the row done and add the attempt's history row, in the caller's transaction."""
    now = datetime.now(UTC)
    for column, value in values(MARK, status, now).items():
        setattr(event, column, value)
    event.processed_at, event.last_error, event.last_traceback = now, None, None
    attempts.add(session, event.endpoint, event.event_id, event.attempts, started_at, status, ran)


def _process_locked(
    sessions: sessionmaker[Session], claimed: Claimed, work: Work, started_at: datetime, prepared: Prepared
) -> str:
    """SQLite, when the unlocked path met a busy database: one transaction holding the write lock
    throughout (the provider's API, if any, was called before it)."""
    with sessions.begin() as session:
        event = mine(session, claimed.endpoint, claimed.event_id, claimed.attempts)
        if event is None:
            return "skipped"  # a newer claim took over; it decides
        status = _run(session, event, work, prepared)
        _mark(session, event, status, started_at, work.handlers)
    return status


def _finish(
    session: Session,
    endpoint: str,
    event_id: str,
    attempt: int,
    ref: ObjectRef | None,
    work: Work,
    status: Status,
    started_at: datetime,
) -> bool:
    """Apply the state and mark the row, if the claim is still ours."""
    event = mine(session, endpoint, event_id, attempt)
    if event is None:
        return False
    if ref is not None:
        _, ref = apply_state(session, endpoint, event_id, ref, work.fold)
        event.object_type, event.object_id, event.object_version = ref.type, ref.id, ref.version
    _mark(session, event, status, started_at, work.handlers)
    return True


class _Superseded(Exception):
    """A newer claim took over while the handlers ran: their writes roll back."""


def _changes(session: Session) -> int:
    dbapi: Any = session.connection().connection.dbapi_connection
    return int(dbapi.total_changes)


def process(
    sessions: sessionmaker[Session],
    deferred_sessions: sessionmaker[Session],
    claimed: Claimed,
    work: Work,
    started_at: datetime,
) -> str:
    """The handlers run without holding the write lock (see the module's doc)."""
    endpoint, event_id, attempt = claimed.endpoint, claimed.event_id, claimed.attempts
    with deferred_sessions() as session:
        with session.begin():
            event = mine(session, endpoint, event_id, attempt)
        if event is None:
            return "skipped"
        session.expunge(event)  # read only: nothing of it is flushed with the handlers' writes
        prepared = data, ref = work.prepare()
        state: Any = None
        latest = True
        view: ObjectRef | None = None  # the object as this event leaves it: after the fold, if any
        if ref is not None:
            with session.begin():
                view, _ = _folded(session, endpoint, work.fold, ref)  # a fold's preview
                current = session.get(Object, (endpoint, ref.type, ref.id))
            if current is not None and current.version >= view.version:
                state, latest = current.state, current.version == view.version
            else:
                state = view.state
        status = _status(work, ref)
        # The version handlers and deliveries see is the folded one, as the mark stores it and as
        # PostgreSQL's path gives (an Adyen CAPTURE is its payment's version 2, not its own 1).
        seen = Seen(
            data,
            view.type if view else event.object_type,
            view.id if view else event.object_id,
            view.version if view else event.object_version,
            latest,
            state,
            session,
        )
        try:
            with session.begin():
                before = _changes(session)  # BEGIN (deferred): no lock, no snapshot yet
                if work.handlers:
                    work.run(seen)
                session.flush()
                wrote = _changes(session) != before
                # A handler that wrote holds the write lock: the mark joins its writes.
                if wrote and not _finish(session, endpoint, event_id, attempt, ref, work, status, started_at):
                    raise _Superseded
        except _Superseded:
            return "skipped"
        except OperationalError as exc:
            if not is_busy(exc):
                raise
            return _process_locked(sessions, claimed, work, started_at, prepared)
    if not wrote:
        with sessions.begin() as session:
            if not _finish(session, endpoint, event_id, attempt, ref, work, status, started_at):
                return "skipped"
    return status
