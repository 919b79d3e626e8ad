"""``config_secrets.last_matched_at``'s writes: when each database secret last verified a delivery,
set in one statement per flush (``webhooks.receiver.last_matched`` notes them in memory)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, Table, bindparam, or_, update

from webhooks.tables.configuration import ConfigSecret

SECRETS: Table = ConfigSecret.__table__  # type: ignore[assignment]
# Only ever moves forward: two processes flushing in either order leave the later time, and a
# secret deleted meanwhile (its endpoint deleted) is simply not there to update.
SET_MATCHED = (
    update(SECRETS)
    .where(
        SECRETS.c.id == bindparam("secret_id"),
        or_(SECRETS.c.last_matched_at.is_(None), SECRETS.c.last_matched_at < bindparam("at")),
    )
    .values(last_matched_at=bindparam("at"))
)


def record(conn: Connection, matched: dict[str, datetime]) -> None:
    """Set each secret's ``last_matched_at`` to its time in ``matched`` where that is later."""
    if matched:
        conn.execute(SET_MATCHED, [{"secret_id": k, "at": at} for k, at in sorted(matched.items())])
