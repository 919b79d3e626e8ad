"""The tables: ``events`` (one row per provider event), ``bodies`` (the raw body of a delivery that
carried several events, kept once), ``tombstones`` (the ids and replay keys of purged events),
``objects`` (latest state per object), ``attempts`` (one row per processing attempt) and
``replays`` (the console's audit log). Forwarding's tables are in ``webhooks.tables.forwarding``,
on the same metadata (``webhooks.tables``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Select,
    String,
    Text,
    false,
    func,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, column_property, mapped_column
from sqlalchemy.sql.elements import TextClause
from sqlalchemy.sql.selectable import ScalarSelect

from webhooks.vocabulary import DeliveryStatus, Status

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

Json = JSON().with_variant(JSONB(), "postgresql")
Timestamp = Annotated[datetime, mapped_column(DateTime(timezone=True))]
Name = Annotated[str, mapped_column(String(100))]
Ident = Annotated[str, mapped_column(String(255))]

STATUSES = tuple(s.value for s in Status)
DELIVERY_STATUSES = tuple(s.value for s in DeliveryStatus)
# The database refuses any other word (named ck_events_status by the naming convention).
STATUS_CHECK = "status IN (" + ", ".join(f"'{s}'" for s in STATUSES) + ")"
# The rows still to be processed (``ix_events_unfinished``'s predicate: a query must repeat it).
UNFINISHED_STATUSES = (Status.RECEIVED.value, Status.QUEUED.value, Status.PROCESSING.value)
UNFINISHED = "status IN (" + ", ".join(f"'{s}'" for s in UNFINISHED_STATUSES) + ")"


def unfinished() -> TextClause:
    """``ix_events_unfinished``'s predicate as a WHERE term, added word for word to the queries
    meant to use it: SQLite uses a partial index only when the query repeats its condition
    (a bound ``status IN (?, ?)`` does not), PostgreSQL proves it from literals too."""
    return text(UNFINISHED)


# ``ix_events_endpoint_feed``'s predicate: true of every row, stated only by the endpoint feed.
ENDPOINT_FEED = "status IS NOT NULL"
# Objects whose fold marked a gap (``ix_objects_gaps``' predicate, per dialect: a query must
# repeat it word for word for the planner to use the partial index).
GAP_WHERE = {"postgresql": "(state ->> 'gap') = 'true'", "sqlite": "json_extract(state, '$.gap') = 1"}


# Counts of a set that grows with the history (failed events, failed deliveries, what a purge
# will delete) stop at COUNT_CAP + 1 rows of an index: bounded whatever the table size; a count
# above COUNT_CAP reads as "COUNT_CAP+" (the console) or as that floor (the metrics).
COUNT_CAP = 10_000


def capped_count(query: Select[Any]) -> ScalarSelect[int]:
    """``SELECT count(*)`` of at most ``COUNT_CAP + 1`` rows of ``query``, as a scalar subquery."""
    return select(func.count()).select_from(query.limit(COUNT_CAP + 1).subquery()).scalar_subquery()


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Duplicate(Base):
    """How many times an event was delivered again after it was stored (one row per event that
    was, written on the duplicate path only: never a lock on the ``events`` row, which a worker
    holds while its handlers run)."""

    __tablename__ = "duplicates"

    endpoint: Mapped[Name] = mapped_column(primary_key=True)
    event_id: Mapped[Ident] = mapped_column(primary_key=True)
    count: Mapped[int] = mapped_column(BigInteger)
    last_at: Mapped[Timestamp]


class Event(Base):
    __tablename__ = "events"

    endpoint: Mapped[Name] = mapped_column(primary_key=True)  # the endpoint's name; ``kind``: its provider kind
    event_id: Mapped[Ident] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    event_type: Mapped[Ident]
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    received_at: Mapped[Timestamp]
    status_at: Mapped[Timestamp]
    # A claim's lease (``processing``): until then the sweeper leaves the row to its job; NULL:
    # never claimed, or claimed before revision 0014 (an expired lease).
    claimed_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    processed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    object_type: Mapped[str | None] = mapped_column(String(100))
    object_id: Mapped[str | None] = mapped_column(String(255))
    object_version: Mapped[int | None] = mapped_column(BigInteger)
    # The signed body; for one event of a multi-event delivery (``body_digest`` set), the event's
    # own item as JSON, the delivery's body and headers being kept once in ``bodies``.
    payload: Mapped[bytes] = mapped_column(LargeBinary)
    item_index: Mapped[int | None] = mapped_column(Integer)  # its position in the delivery's body
    headers: Mapped[dict[str, str]] = mapped_column(Json)  # ``{}`` when they live in ``bodies``
    body_digest: Mapped[str | None] = mapped_column(String(64))  # sha256 hex: ``bodies`` key
    scheme: Mapped[str] = mapped_column(String(32))
    secret_index: Mapped[int | None] = mapped_column(Integer)
    secret_id: Mapped[str | None] = mapped_column(String(40))  # the matching ``config_secrets.id``; NULL: the file's
    signed_at: Mapped[int | None] = mapped_column(BigInteger)
    last_error: Mapped[str | None] = mapped_column(Text)
    last_traceback: Mapped[str | None] = mapped_column(Text)
    # A provider reference searched by operators that is neither the event nor the object id
    # (Adyen ``merchantReference``); set at receive time from what verification already parsed.
    reference: Mapped[str | None] = mapped_column(String(255))
    # sha256 hex of the verified signature for schemes that sign no id or timestamp: unique per
    # endpoint (NULLs never collide), so one captured signature can never mint a second event.
    replay_key: Mapped[str | None] = mapped_column(String(64))
    traceparent: Mapped[str | None] = mapped_column(String(55))  # the receive span's (``webhooks.tracing``)
    # Its duplicate deliveries (``duplicates``), read only where asked for (``undefer``: the console's lists).
    duplicates: Mapped[int | None] = column_property(
        select(Duplicate.count)
        .where(Duplicate.endpoint == endpoint, Duplicate.event_id == event_id)
        .correlate_except(Duplicate)
        .scalar_subquery(),
        deferred=True,
    )

    __table_args__ = (
        # Keyset pagination, newest first: (received_at, endpoint, event_id) is the cursor, so both
        # the order and the seek come straight from an index, whatever the table size.
        Index("ix_events_feed", "received_at", "endpoint", "event_id"),
        Index("ix_events_status_feed", "status", "received_at", "endpoint", "event_id"),
        # One endpoint's feed (``provider=``), its time range and, on PostgreSQL, its status counts
        # read from the index alone. Partial on a condition every row meets (``status`` is NOT
        # NULL) that only the feed's queries state (``ENDPOINT_FEED``): a lookup of ``endpoint =
        # … AND event_id = …`` cannot use it, so on a table without statistics yet it is never
        # planned through this index at the primary key's cost (every row of the endpoint; 0008).
        Index(
            "ix_events_endpoint_feed",
            "endpoint",
            "received_at",
            postgresql_include=["status", "event_id"],
            postgresql_where=text(ENDPOINT_FEED),
            sqlite_where=text(ENDPOINT_FEED),
        ),
        # The sweeper and the oldest-pending gauges: unfinished rows only, so finished history
        # (nearly every row) is neither read by them nor written into this index.
        Index(
            "ix_events_unfinished",
            "status",
            "status_at",
            postgresql_where=text(UNFINISHED),
            sqlite_where=text(UNFINISHED),
        ),
        Index("ix_events_object_id", "object_id"),  # console search, and "events that moved it"
        # Partial: most events have neither (and a full index on ``endpoint, replay_key`` lured
        # PostgreSQL, without statistics, away from the primary key for ``endpoint, event_id``).
        Index(
            "ix_events_reference",
            "reference",
            postgresql_where=text("reference IS NOT NULL"),
            sqlite_where=text("reference IS NOT NULL"),
        ),
        Index(
            "ux_events_replay_key",
            "endpoint",
            "replay_key",
            unique=True,
            postgresql_where=text("replay_key IS NOT NULL"),
            sqlite_where=text("replay_key IS NOT NULL"),
        ),
        Index(
            "ix_events_body_digest",
            "endpoint",
            "body_digest",
            postgresql_where=text("body_digest IS NOT NULL"),
            sqlite_where=text("body_digest IS NOT NULL"),
        ),
        CheckConstraint(STATUS_CHECK, name="status"),
    )


class Body(Base):
    """The raw signed body and headers of a delivery that carried several events, kept once
    (re-verify and audit need them); its events hold their own items and ``body_digest``."""

    __tablename__ = "bodies"

    endpoint: Mapped[Name] = mapped_column(primary_key=True)
    digest: Mapped[str] = mapped_column(String(64), primary_key=True)  # sha256 hex of ``body``
    body: Mapped[bytes] = mapped_column(LargeBinary)
    headers: Mapped[dict[str, str]] = mapped_column(Json)
    received_at: Mapped[Timestamp]


class Tombstone(Base):
    """What stays of a purged event: its id and replay key, so a captured delivery of it can never
    be stored again (a database trigger skips such an insert; see migration 0009)."""

    __tablename__ = "tombstones"

    endpoint: Mapped[Name] = mapped_column(primary_key=True)
    event_id: Mapped[Ident] = mapped_column(primary_key=True)
    replay_key: Mapped[str | None] = mapped_column(String(64))
    purged_at: Mapped[Timestamp]

    __table_args__ = (
        Index(
            "ix_tombstones_replay_key",
            "endpoint",
            "replay_key",
            postgresql_where=text("replay_key IS NOT NULL"),
            sqlite_where=text("replay_key IS NOT NULL"),
        ),
        # Expiry walks it in keyset order: one purge run gives all its tombstones the same time.
        Index("ix_tombstones_purged", "purged_at", "endpoint", "event_id"),
    )


class Rejection(Base):
    """A refused delivery, kept for diagnosis (bounded: newest N rows, at most D days)."""

    __tablename__ = "rejections"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    endpoint: Mapped[Name]
    kind: Mapped[str | None] = mapped_column(String(32))
    reason: Mapped[str] = mapped_column(String(64))
    detail: Mapped[str] = mapped_column(String(500))
    http_status: Mapped[int] = mapped_column(Integer)
    received_at: Mapped[Timestamp]
    url: Mapped[str] = mapped_column(Text)
    headers: Mapped[dict[str, str]] = mapped_column(Json)
    body: Mapped[bytes] = mapped_column(LargeBinary)
    outcome: Mapped[str | None] = mapped_column(String(100))
    # Whether the request's HTTP Basic credentials were right on arrival: kept as a fact in a
    # column (never as a client-controllable header), so a re-verify can pass basic auth.
    basic_auth_ok: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    reverified_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (Index("ix_rejections_received_at", "received_at"),)


class RejectionCount(Base):
    """Every rejection counted by endpoint and reason (kept when quarantine rows are pruned)."""

    __tablename__ = "rejection_counts"

    endpoint: Mapped[Name] = mapped_column(primary_key=True)
    reason: Mapped[str] = mapped_column(String(64), primary_key=True)
    count: Mapped[int] = mapped_column(BigInteger)
    last_at: Mapped[Timestamp]


class Object(Base):
    __tablename__ = "objects"

    endpoint: Mapped[Name] = mapped_column(primary_key=True)
    object_type: Mapped[Name] = mapped_column(primary_key=True)
    object_id: Mapped[Ident] = mapped_column(primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger)
    state: Mapped[Any] = mapped_column(Json)
    last_event_id: Mapped[Ident]
    updated_at: Mapped[Timestamp]

    __table_args__ = (
        # The gaps list: only the objects marked ``gap``, an endpoint's type newest first (a few
        # among millions; the primary key's endpoint and type lead too, or SQLite prefers it).
        Index(
            "ix_objects_gaps",
            "endpoint",
            "object_type",
            "updated_at",
            "object_id",
            postgresql_where=text(GAP_WHERE["postgresql"]),
            sqlite_where=text(GAP_WHERE["sqlite"]),
        ),
    )


class Attempt(Base):
    """One processing attempt of an event and its outcome (``processed``, ``ignored``, ``error``)."""

    __tablename__ = "attempts"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    endpoint: Mapped[Name]
    event_id: Mapped[Ident]
    number: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[Timestamp]
    finished_at: Mapped[Timestamp]
    status: Mapped[str] = mapped_column(String(16))
    error: Mapped[str | None] = mapped_column(Text)
    traceback: Mapped[str | None] = mapped_column(Text)
    # The handlers that ran (``module.qualname``); ``[]`` when none matched; NULL: not recorded
    # (failed attempts, and attempts before revision 0010).
    handlers: Mapped[list[str] | None] = mapped_column(Json)

    __table_args__ = (
        Index("ix_attempts_event", "endpoint", "event_id", "number"),
        Index("ix_attempts_finished_at", "finished_at"),
    )  # the console's overview


class Replay(Base):
    """The audit log of replays: who asked, when, why, for which filter and which events."""

    __tablename__ = "replays"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    at: Mapped[Timestamp]
    who: Mapped[Name]
    reason: Mapped[str] = mapped_column(Text)
    filter: Mapped[dict[str, Any]] = mapped_column(Json)
    count: Mapped[int] = mapped_column(Integer)
    event_ids: Mapped[list[list[str]]] = mapped_column(Json)

    __table_args__ = (Index("ix_replays_at", "at"),)
