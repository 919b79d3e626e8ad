"""Forwarding's tables: ``deliveries`` (one per event and destination), ``delivery_attempts``,
``destinations`` (each one's circuit, pause and rate budget) and ``forwarded_objects`` (the newest
version an ordered destination received per object). On ``webhooks.tables.events.Base``'s metadata, beside
the events' tables (``webhooks.tables`` gathers both)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Boolean, CheckConstraint, DateTime, Float, Index, Integer, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from webhooks.tables.events import DELIVERY_STATUSES, Base, Ident, Name, Timestamp

DELIVERY_CHECK = "status IN (" + ", ".join(f"'{s}'" for s in DELIVERY_STATUSES) + ")"


class Delivery(Base):
    """One event to send to one destination: created once, with the event's processing."""

    __tablename__ = "deliveries"

    endpoint: Mapped[Name] = mapped_column(primary_key=True)
    event_id: Mapped[Ident] = mapped_column(primary_key=True)
    destination: Mapped[Name] = mapped_column(primary_key=True)
    message_id: Mapped[str] = mapped_column(String(64))  # ``webhook-id``: stable across retries and replays
    status: Mapped[str] = mapped_column(String(16))
    event_type: Mapped[Ident]
    object_type: Mapped[str | None] = mapped_column(String(100))
    object_id: Mapped[str | None] = mapped_column(String(255))
    object_version: Mapped[int | None] = mapped_column(BigInteger)
    forced: Mapped[bool] = mapped_column(Boolean, default=False)  # a replay: sent even if not newer
    attempts: Mapped[int] = mapped_column(Integer, default=0)  # attempts spent (not probes, not throttled)
    lease: Mapped[int] = mapped_column(Integer, default=0)  # the token of the latest send
    leased_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))  # in flight until then
    next_attempt_at: Mapped[Timestamp]
    created_at: Mapped[Timestamp]
    status_at: Mapped[Timestamp]
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_status_code: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    # The identity of the destination it is for (``Destination.identity``, a hash of the URL; NULL:
    # created before 0014, whichever is configured under the name): another is never sent it.
    target: Mapped[str | None] = mapped_column(String(64))
    traceparent: Mapped[str | None] = mapped_column(String(55))  # the job's: each forward continues its trace

    __table_args__ = (
        # The forwarder's scan: a destination's pending deliveries by due time.
        Index(
            "ix_deliveries_due",
            "destination",
            "next_attempt_at",
            postgresql_where=text("status = 'pending'"),
            sqlite_where=text("status = 'pending'"),
        ),
        # An ordered destination's head of line per object.
        Index(
            "ix_deliveries_object",
            "destination",
            "endpoint",
            "object_type",
            "object_id",
            "object_version",
            postgresql_where=text("status = 'pending'"),
            sqlite_where=text("status = 'pending'"),
        ),
        # The failed count per destination (the console, the API): failed rows only, counted capped.
        Index(
            "ix_deliveries_failed",
            "destination",
            postgresql_where=text("status = 'failed'"),
            sqlite_where=text("status = 'failed'"),
        ),
        CheckConstraint(DELIVERY_CHECK, name="status"),
    )


class DeliveryAttempt(Base):
    """One request to a destination and what came back (or why nothing did)."""

    __tablename__ = "delivery_attempts"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    endpoint: Mapped[Name]
    event_id: Mapped[Ident]
    destination: Mapped[Name]
    number: Mapped[int] = mapped_column(Integer)  # the delivery's attempts after this one
    started_at: Mapped[Timestamp]
    seconds: Mapped[float] = mapped_column(Float)
    outcome: Mapped[str] = mapped_column(String(16))  # ``Outcome``
    status_code: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    response: Mapped[str | None] = mapped_column(Text)  # the start of the answer's body

    __table_args__ = (
        Index("ix_delivery_attempts_delivery", "endpoint", "event_id", "destination"),
        Index("ix_delivery_attempts_started_at", "started_at"),
    )


class DestinationState(Base):
    """A destination's health, shared by every worker: pause, circuit, throttle, rate budget."""

    __tablename__ = "destinations"

    name: Mapped[Name] = mapped_column(primary_key=True)
    paused: Mapped[bool] = mapped_column(Boolean, default=False)
    paused_reason: Mapped[str | None] = mapped_column(Text)
    failures: Mapped[int] = mapped_column(Integer, default=0)  # consecutive
    opened_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))  # the circuit
    probe_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    probe_seconds: Mapped[float | None] = mapped_column(Float)
    throttled_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    tokens: Mapped[float | None] = mapped_column(Float)  # the rate limit's bucket
    tokens_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_success_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_error: Mapped[str | None] = mapped_column(Text)


class ForwardedObject(Base):
    """The newest version of an object an ordered destination has received."""

    __tablename__ = "forwarded_objects"

    destination: Mapped[Name] = mapped_column(primary_key=True)
    endpoint: Mapped[Name] = mapped_column(primary_key=True)
    object_type: Mapped[Name] = mapped_column(primary_key=True)
    object_id: Mapped[Ident] = mapped_column(primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger)
