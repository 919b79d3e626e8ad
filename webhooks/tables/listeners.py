"""``listeners``: the audit of the event stream's listeners (``webhooks.admin.stream``, docs/listen.md)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, DateTime, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from webhooks.tables.events import Base


class Listener(Base):
    """One stream a client opened: who, from where, for what, and how it ended (NULL: open, or
    its process died)."""

    __tablename__ = "listeners"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    who: Mapped[str] = mapped_column(Text)
    address: Mapped[str] = mapped_column(String(64))
    endpoints: Mapped[str] = mapped_column(Text)  # the endpoint globs asked for, comma-separated
    types: Mapped[str] = mapped_column(Text)  # the event-type globs
    resumed_from: Mapped[str | None] = mapped_column(String(64))  # the cursor or ``since`` it began at
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    sent: Mapped[int] = mapped_column(BigInteger)
    ended_because: Mapped[str | None] = mapped_column(String(32))  # closed, stopping, behind, error

    __table_args__ = (Index("ix_listeners_started_at", "started_at"),)
