"""``process_event(provider, event_id)``: the RQ job that acts on one stored event.

Claim the row (committed, so a worker that dies still counts an attempt), then in one transaction:
lock the row and check the claim is still ours, find the object and its version, serialize per
object, apply the state only when newer, run the handlers, mark the row — so a failure leaves
nothing half done. Errors are recorded on the row and re-raised for RQ to retry; after the last
try the row is ``failed``.

Exactly once in effect: the claim's attempt number is a token. Two jobs of one event (a replay, a
sweeper recovering a job it believes dead) serialize on the row lock, and only the holder of the
latest claim may mark the row; a row already ``processed`` is never claimed again. While the
transaction runs the row stays locked, which is how the sweeper tells a live ``processing`` row
from one stranded by a killed worker (``FOR UPDATE SKIP LOCKED``; on SQLite the write lock).
Per object, the advisory lock (and the ``objects`` row lock taken by the upsert) serialize events.
"""

from __future__ import annotations

import dataclasses
import json
import traceback
from datetime import UTC, datetime
from typing import Any

from rq import get_current_job
from sqlalchemy import select, text, update
from sqlalchemy.orm import Session

from jobs import attempts, fetch, handlers
from webhooks import providers, runtime
from webhooks.config import Settings
from webhooks.db import upsert
from webhooks.models import Event, Object
from webhooks.providers.base import ObjectRef

CLAIMABLE = ("received", "queued", "processing", "failed")
TRACEBACK_LIMIT = 8000


def _claim(session: Session, provider: str, event_id: str) -> int | None:
    """received/queued/failed (or an abandoned processing) → processing; returns the attempt
    number (the claim's token), or None if there is nothing to do."""
    claimed = session.execute(
        update(Event)
        .where(Event.provider == provider, Event.event_id == event_id, Event.status.in_(CLAIMABLE))
        .values(status="processing", attempts=Event.attempts + 1, status_at=datetime.now(UTC))
        .returning(Event.attempts)
    ).first()
    return None if claimed is None else int(claimed[0])


def _mine(session: Session, provider: str, event_id: str, attempt: int) -> Event | None:
    """Lock the row for this transaction; None when another claim has superseded ours."""
    return session.scalars(
        select(Event)
        .where(Event.provider == provider, Event.event_id == event_id,
               Event.status == "processing", Event.attempts == attempt)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).first()


def _lock_object(session: Session, provider: str, ref: ObjectRef) -> None:
    """Serialize events of one object (PostgreSQL advisory lock; SQLite writers are serial)."""
    if session.get_bind().dialect.name == "postgresql":
        key = json.dumps([provider, ref.type, ref.id])
        session.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"), {"k": key})


def apply_state(session: Session, provider: str, event_id: str, ref: ObjectRef) -> Object:
    """Conditional upsert: the stored state moves only to a strictly newer version."""
    stmt = upsert(session, Object).values(
        provider=provider, object_type=ref.type, object_id=ref.id, version=ref.version,
        state=ref.state, last_event_id=event_id, updated_at=datetime.now(UTC),
    )
    stmt = stmt.on_conflict_do_update(
        index_elements=["provider", "object_type", "object_id"],
        set_={k: stmt.excluded[k] for k in ("version", "state", "last_event_id", "updated_at")},
        where=Object.version < stmt.excluded.version,
    )
    session.execute(stmt)
    current = session.scalars(
        select(Object).where(
            Object.provider == provider, Object.object_type == ref.type, Object.object_id == ref.id
        ).execution_options(populate_existing=True)
    ).one()
    return current


def _run(session: Session, event: Event, settings: Settings) -> str:
    provider = providers.get(event.kind)
    data = provider.event_data(event.payload, event.item_index)
    ref = provider.extract(event.event_type, data)
    endpoint = settings.endpoints.get(event.provider)
    if ref is not None and fetch.needs_fetch(endpoint, ref):
        assert endpoint is not None
        # Before taking the object lock: no network wait while holding it.
        ref = dataclasses.replace(ref, state=fetch.stripe_object(endpoint, ref))
    state: Any = None
    latest = True
    if ref is not None:
        _lock_object(session, event.provider, ref)
        current = apply_state(session, event.provider, event.event_id, ref)
        state, latest = current.state, current.version == ref.version
        event.object_type, event.object_id, event.object_version = ref.type, ref.id, ref.version
    found = handlers.handlers_for(event.provider, event.kind, event.event_type, settings.handler_modules)
    context = handlers.HandlerEvent(
        event.provider, event.kind, event.event_id, event.event_type, data,
        event.object_type, event.object_id, event.object_version, latest, event.attempts, session,
    )
    for handler in found:
        handlers.call(handler, context, state)
    return "processed" if ref is not None or found else "ignored"


def process_event(provider: str, event_id: str) -> str:
    """Process one event; returns the final status (or ``skipped`` when there was nothing to do)."""
    rt = runtime.current()
    handlers.load(rt.settings.handler_modules)
    job = get_current_job()
    last_try = job is None or not job.retries_left
    started_at = datetime.now(UTC)
    with rt.sessions() as session:
        with session.begin():
            attempt = _claim(session, provider, event_id)
        if attempt is None:
            return "skipped"
        number = attempt
        try:
            with session.begin():
                event = _mine(session, provider, event_id, attempt)
                if event is None:
                    return "skipped"  # a newer claim took over; it decides
                status = _run(session, event, rt.settings)
                event.status, event.status_at = status, datetime.now(UTC)
                event.processed_at, event.last_error, event.last_traceback = datetime.now(UTC), None, None
        except Exception as exc:
            session.rollback()
            with session.begin():
                session.execute(
                    update(Event)
                    .where(Event.provider == provider, Event.event_id == event_id,
                           Event.status == "processing", Event.attempts == attempt)
                    .values(
                        status="failed" if last_try else "queued",
                        status_at=datetime.now(UTC),
                        last_error=f"{exc.__class__.__name__}: {exc}"[:2000],
                        last_traceback=traceback.format_exc()[-TRACEBACK_LIMIT:],
                    )
                )
            attempts.record(rt, provider, event_id, number, started_at, "error",
                            f"{exc.__class__.__name__}: {exc}"[:2000], traceback.format_exc()[-TRACEBACK_LIMIT:])
            raise
    attempts.record(rt, provider, event_id, number, started_at, status)
    return status
