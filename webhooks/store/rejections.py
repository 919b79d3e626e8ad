"""The per-endpoint, per-reason tally of refused deliveries (``rejection_counts``): one upsert a
refusal, kept even when the quarantine keeps no row (``webhooks.receiver.quarantine``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from webhooks.engines import upsert
from webhooks.tables.events import RejectionCount


def count_rejection(session: Session, endpoint: str, reason: str, now: datetime) -> None:
    stmt = upsert(session, RejectionCount).values(endpoint=endpoint, reason=reason, count=1, last_at=now)
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=["endpoint", "reason"],
            set_={"count": RejectionCount.count + 1, "last_at": stmt.excluded.last_at},
        )
    )
