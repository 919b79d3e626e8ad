"""Times read back from the database, made comparable: SQLite hands back naive datetimes (UTC)."""

from __future__ import annotations

from datetime import UTC, datetime


def aware(value: datetime) -> datetime:
    """``value`` with its time zone: a naive value is taken as UTC (what every column stores)."""
    return value if value.tzinfo else value.replace(tzinfo=UTC)
