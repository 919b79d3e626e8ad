"""What both adapters do through SQLAlchemy: the operations with no hand-built fast path
(replay, the sweeper's queries, leaving rows for the sweeper, the replayed-signature check, a
failed attempt). ``SqliteStore`` and ``PostgresStore`` extend it with their own paths."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Column, Engine, Table, bindparam, update
from sqlalchemy.orm import Session, sessionmaker

from webhooks.db import deferred, make_sessionmaker
from webhooks.models import Event
from webhooks.store import attempts
from webhooks.store.base import Claimed
from webhooks.store.transitions import FAIL, values
from webhooks.words import Status

# ===== the worker's shared part: the claimed row's columns, a failure under the claim's token ===
EVENTS: Table = Event.__table__  # type: ignore[assignment]  # a Table (mypy sees a FromClause)
CLAIMED: tuple[Column[Any], ...] = tuple(EVENTS.c[name] for name in Claimed._fields)  # what a claim returns


def bound(moved: dict[str, object]) -> dict[str, object]:
    """A move's values (``transitions.values``) as the parameters of a statement built once
    (``status=bindparam("b_status")``, ``status_at=bindparam("b_status_at")``)."""
    return {f"b_{k}": v for k, v in moved.items()}


_FAIL = (
    update(Event)
    .where(Event.endpoint == bindparam("b_endpoint"), Event.event_id == bindparam("b_event_id"),
           Event.status.in_(FAIL.sources), Event.attempts == bindparam("b_attempt"))
    .values(status=bindparam("b_status"), status_at=bindparam("b_status_at"), last_error=bindparam("b_error"),
            last_traceback=bindparam("b_trace"))
    .returning(Event.attempts)
)


class SqlStore:
    def __init__(self, engine: Engine, **parts: Any) -> None:
        self.engine = engine
        # The runtime's sessionmakers when given (its handlers' sessions are the same kind).
        self.sessions: sessionmaker[Session] = parts.get("sessions") or make_sessionmaker(engine)
        # SQLite transactions that wait for no writer until they write (PostgreSQL: the same).
        self.deferred_sessions: sessionmaker[Session] = (parts.get("deferred_sessions")
                                                         or make_sessionmaker(deferred(engine)))

    # ===== the worker's shared part (claim / process / fail helpers) ==========================
    def fail(self, endpoint: str, event_id: str, attempt: int, last_try: bool, error: str, trace: str,
             started_at: datetime) -> bool:
        """``FAIL`` under the token ``attempt`` (``failed`` after the last try), then the attempt's
        row (best effort, ``attempts.record``); False, and nothing written, when superseded."""
        moved = values(FAIL, Status.FAILED if last_try else Status.QUEUED, datetime.now(UTC))
        params = {"b_endpoint": endpoint, "b_event_id": event_id, "b_attempt": attempt, "b_error": error,
                  "b_trace": trace, **bound(moved)}
        with self.sessions.begin() as session:
            marked = session.execute(_FAIL, params).first() is not None
        if marked:
            attempts.record(self.sessions, endpoint, event_id, attempt, started_at, "error", error, trace)
        return marked

    def time_out(self, claim: Any, error: str, trace: str) -> bool:
        """The attempt of a job stuck past its timeout, failed under its token: the thread's own
        failure path must then record nothing (``claim.abandoned``, set first)."""
        claim.abandoned = True
        return self.fail(claim.endpoint, claim.event_id, claim.attempt, claim.last_try, error, trace,
                         claim.started_at)

    def keep(self) -> contextlib.AbstractContextManager[None]:
        """No connection is kept (SQLite's pool is cheap); PostgreSQL overrides it."""
        return contextlib.nullcontext()

    # ===== the receiver, the sweeper, replay =================================================
