"""The history of processing attempts, for the console: one row per attempt and its outcome.

A successful attempt's row (``add``) joins the transaction that marks the event, so it commits
with the mark at no extra commit. A failed attempt's row (``record``) is written in its own short
transaction after the attempt's was rolled back, so it still leaves its error and traceback behind;
best effort: losing that history row must never fail or retry the event, so database errors there
are logged and swallowed.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from sqlalchemy import insert
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from webhooks.tables.events import Attempt

log = logging.getLogger(__name__)
_ADD = insert(Attempt.__table__)  # type: ignore[arg-type]  # a Table: a plain Core INSERT


def add(
    session: Session,
    endpoint: str,
    event_id: str,
    number: int,
    started_at: datetime,
    status: str,
    handlers: list[str],
    error: str | None = None,
) -> None:
    """Add the row of attempt ``number`` (``processed`` or ``ignored``, the ``handlers`` that ran,
    and why when an ``ignored`` says one) to the session's transaction (a plain INSERT: nothing
    reads the row back, so no ORM object and no fetched id)."""
    values = {
        "endpoint": endpoint,
        "event_id": event_id,
        "number": number,
        "started_at": started_at,
        "finished_at": datetime.now(UTC),
        "status": status,
        "handlers": handlers,
    }
    session.connection().execute(_ADD, values if error is None else {**values, "error": error})


def record(
    sessions: sessionmaker[Session],
    endpoint: str,
    event_id: str,
    number: int,
    started_at: datetime,
    status: str,
    error: str | None = None,
    traceback: str | None = None,
) -> None:
    """Store attempt ``number`` of the event: ``processed``, ``ignored`` or ``error``."""
    try:
        with sessions.begin() as session:
            session.add(
                Attempt(
                    endpoint=endpoint,
                    event_id=event_id,
                    number=number,
                    started_at=started_at,
                    finished_at=datetime.now(UTC),
                    status=status,
                    error=error,
                    traceback=traceback,
                )
            )
    except SQLAlchemyError:
        log.exception("could not record attempt %s of %s/%s", number, endpoint, event_id)
