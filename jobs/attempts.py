"""The history of processing attempts, for the console: one row per attempt and its outcome.

Written in its own short transaction after the attempt's own one, so a failed attempt (whose work
was rolled back) still leaves its error and traceback behind. Best effort: losing a history row
must never fail or retry the event, so database errors here are logged and swallowed.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from sqlalchemy.exc import SQLAlchemyError

from webhooks.models import Attempt
from webhooks.runtime import Runtime

log = logging.getLogger(__name__)


def record(
    rt: Runtime, provider: str, event_id: str, number: int, started_at: datetime, status: str,
    error: str | None = None, traceback: str | None = None,
) -> None:
    """Store attempt ``number`` of the event: ``processed``, ``ignored`` or ``error``."""
    try:
        with rt.sessions.begin() as session:
            session.add(Attempt(
                provider=provider, event_id=event_id, number=number, started_at=started_at,
                finished_at=datetime.now(UTC), status=status, error=error, traceback=traceback,
            ))
    except SQLAlchemyError:
        log.exception("could not record attempt %s of %s/%s", number, provider, event_id)
