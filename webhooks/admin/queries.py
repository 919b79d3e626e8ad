"""The console's reads, shared by the pages, the JSON API and the CLI (no Flask here).

The events list is keyset-paginated on ``(received_at, endpoint, event_id)`` — the order of the
``ix_events_feed`` / ``ix_events_status_feed`` / ``ix_events_endpoint_feed`` indexes — so a page
costs the same on the first page of ten rows and deep into millions: one seek, ``limit + 1``
rows read. Status counts are capped (``COUNT_CAP``), so they too read a bounded slice
of an index whatever the table size.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Select, and_, exists, func, literal, or_, select, tuple_, type_coerce, union_all
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session, undefer
from sqlalchemy.sql.elements import ColumnElement

from webhooks.errors import WebhooksError
from webhooks.storable import is_storable
from webhooks.tables.events import COUNT_CAP as COUNT_CAP  # the console's cap, defined beside the tables
from webhooks.tables.events import STATUSES, Attempt, Body, Event, Object, Rejection, Replay, capped_count
from webhooks.timestamps import aware

REJECTED = "rejected"  # the key of the recent rejections' count beside the status counts (no status)
MAX_LIMIT = 1000
MAX_ID = 2**63 - 1  # BIGINT; SQLite's INTEGER too
MAX_CURSOR = 8192  # ample for a time, an endpoint name and a 255-character id, as base64 JSON


class FilterError(WebhooksError, ValueError):
    """A filter value that cannot be used; ``reason`` is the API's error code."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Filters:
    """What the operator asked for. ``q`` matches an event id, object id or provider reference."""

    endpoint: str | None = None
    status: str | None = None
    type: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    q: str | None = None

    def as_dict(self) -> dict[str, str]:
        """The non-empty filters as strings (for links, the audit log and the CLI); the endpoint
        under the name those have always given it, ``provider``."""
        out = {}
        for field, value in asdict(self).items():
            key = "provider" if field == "endpoint" else field
            if isinstance(value, datetime):
                out[key] = iso(value) or ""
            elif value is not None:
                out[key] = str(value)
        return out


storable = is_storable  # what the console checks query values with (pages, API, CLI, replays)


def parse_time(value: str) -> datetime:
    """An ISO 8601 time as UTC (UTC when it has no offset). ``bad_time`` also for a time that has
    no UTC equivalent in years 1–9999 (``0001-01-01T00:00+14:00``)."""
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except (ValueError, TypeError, AttributeError, OverflowError) as exc:
        raise FilterError("bad_time") from exc


def parse_id(value: str | None, reason: str = "bad_before") -> int | None:
    """An optional row id (``before=``): ASCII digits, 0 to 2^63 − 1 (a BIGINT; 0: nothing is
    older); else ``reason``. Empty is no bound, as on every paged route.

    ``str.isdigit`` is not enough: it accepts ``²`` and other digits ``int`` refuses."""
    if value is None or value == "":
        return None
    digits = value.lstrip("0") or "0"  # leading zeros say nothing; the length check bounds int()
    if not (value.isascii() and value.isdigit()) or len(digits) > 19 or int(digits) > MAX_ID:
        raise FilterError(reason)
    return int(digits)


def parse_filters(args: Mapping[str, Any]) -> Filters:
    """Filters from query-string-shaped values; ``endpoint`` is an alias of ``provider``."""

    def text(name: str) -> str | None:
        value = args.get(name)
        if value is None:
            return None
        if not storable(str(value)):
            raise FilterError(f"bad_{name}")
        return str(value).strip() or None

    status = text("status")
    if status is not None and status not in STATUSES:
        raise FilterError("bad_status")
    since, until = text("since"), text("until")
    return Filters(
        endpoint=text("provider") or text("endpoint"),
        status=status,
        type=text("type"),
        since=parse_time(since) if since else None,
        until=parse_time(until) if until else None,
        q=text("q"),
    )


def check_args(args: Iterable[tuple[str, str]]) -> None:
    """Every query-string value of a console request: ``bad_text`` for one no database can compare,
    ``bad_before`` for a ``before`` that is not a row id. Routes parse their own parameters too;
    this catches the ones they pass to a query as they are."""
    for name, value in args:
        if not storable(value):
            raise FilterError("bad_text")
        if name == "before":
            parse_id(value)


def keys_fit(values: Iterable[object]) -> bool:
    """Whether a URL's keys (endpoint names, ids) could be in a table at all: False for text no
    database can hold and for numbers beyond a BIGINT, which would otherwise fail in the driver."""
    return all(storable(v) if isinstance(v, str) else not isinstance(v, int) or 0 <= v <= MAX_ID for v in values)


def parse_limit(value: Any, default: int = 50) -> int:
    try:
        return min(max(int(value if value not in (None, "") else default), 1), MAX_LIMIT)
    except (TypeError, ValueError) as exc:
        raise FilterError("bad_limit") from exc


def rejections_query(args: Mapping[str, str], before: str | None) -> Select[Rejection]:
    """Rejections newest first, narrowed by the non-empty ``endpoint`` and ``reason`` arguments
    and by ``before`` (older than that id; read as ``parse_id`` reads every ``before``)."""
    query = select(Rejection).order_by(Rejection.id.desc())
    for name in ("endpoint", "reason"):
        if args.get(name):
            query = query.where(getattr(Rejection, name) == args[name])
    before_id = parse_id(before)
    if before_id is not None:
        query = query.where(Rejection.id < before_id)
    return query


def iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return aware(value).isoformat().replace("+00:00", "Z")


def skew_seconds(event: Event) -> int | None:
    """Receipt time minus the provider's signed timestamp (positive: it reached us later)."""
    if event.signed_at is None:
        return None
    return round(aware(event.received_at).timestamp() - event.signed_at)


# -- cursor ------------------------------------------------------------------------------------


def encode_cursor(event: Event) -> str:
    raw = json.dumps([iso(event.received_at), event.endpoint, event.event_id], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str, str]:
    """The position ``encode_cursor`` wrote; ``bad_cursor`` for anything else, whatever it holds."""
    if len(cursor) > MAX_CURSOR:
        raise FilterError("bad_cursor")
    try:
        at, endpoint, event_id = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError, TypeError, RecursionError) as exc:
        raise FilterError("bad_cursor") from exc
    if not all(isinstance(part, str) and storable(part) for part in (at, endpoint, event_id)):
        raise FilterError("bad_cursor")
    try:
        return parse_time(at), endpoint, event_id
    except FilterError as exc:
        raise FilterError("bad_cursor") from exc


# -- queries -----------------------------------------------------------------------------------


def conditions(filters: Filters, endpoints: Iterable[str] = ()) -> list[ColumnElement[bool]]:
    """The WHERE terms of ``filters``. ``endpoints`` (the configured endpoint names) lets an
    event-id search use the primary key, whose leading column is ``endpoint``."""
    where: list[ColumnElement[bool]] = []
    if filters.endpoint:  # with ``ix_events_endpoint_feed``'s predicate, which only these queries state
        where.extend((Event.endpoint == filters.endpoint, Event.status.is_not(None)))  # ENDPOINT_FEED
    if filters.status:
        where.append(Event.status == filters.status)
    if filters.type:
        where.append(Event.event_type == filters.type)
    if filters.since:
        where.append(Event.received_at >= filters.since)
    if filters.until:
        where.append(Event.received_at < filters.until)
    if filters.q:
        names = [filters.endpoint] if filters.endpoint else sorted(set(endpoints))
        by_id = and_(Event.endpoint.in_(names), Event.event_id == filters.q) if names else Event.event_id == filters.q
        where.append(or_(by_id, Event.object_id == filters.q, Event.reference == filters.q))
    return where


def feed(filters: Filters, endpoints: Iterable[str] = ()) -> Select[Any]:
    """Every matching event, newest first, in index order."""
    return (
        select(Event)
        .where(*conditions(filters, endpoints))
        .order_by(Event.received_at.desc(), Event.endpoint.desc(), Event.event_id.desc())
    )


def after(cursor: str) -> list[ColumnElement[bool]]:
    """The rows after ``cursor`` in feed order: the row comparison, and ``received_at`` bounded on
    its own too, which every feed index can seek on (``ix_events_endpoint_feed`` has no
    ``endpoint`` between ``received_at`` and ``event_id``: a provider's deep page would otherwise
    read that provider's newer rows again before the first one it shows)."""
    at, endpoint, event_id = decode_cursor(cursor)
    key = tuple_(Event.received_at, Event.endpoint, Event.event_id)
    return [Event.received_at <= at, key < (at, endpoint, event_id)]


def feed_page(
    filters: Filters, *, limit: int = 50, cursor: str | None = None, endpoints: Iterable[str] = ()
) -> Select[Any]:
    """The statement of one page: ``limit`` rows of the feed after ``cursor``."""
    query = feed(filters, endpoints)
    if cursor:
        query = query.where(*after(cursor))
    return query.limit(limit)


def page(
    session: Session, filters: Filters, *, limit: int = 50, cursor: str | None = None, endpoints: Iterable[str] = ()
) -> tuple[list[Event], str | None]:
    """One page of the feed and the cursor of the next (None at the end). One query."""
    query = feed_page(filters, limit=limit + 1, cursor=cursor, endpoints=endpoints)
    events = list(session.scalars(query.options(undefer(Event.duplicates))))
    more = len(events) > limit
    events = events[:limit]
    return events, encode_cursor(events[-1]) if more and events else None


def counts_query(filters: Filters, rejected_since: datetime | None = None) -> Any:
    """Events per status for the endpoint and time range, each capped at ``COUNT_CAP + 1``.

    Each status reads at most that many entries of ``ix_events_status_feed`` (with an endpoint,
    of ``ix_events_endpoint_feed``, which carries the status: no table read): exact for the
    statuses an operator acts on (failed, queued), "10 000+" for the rest on a big table. With
    ``rejected_since``, a row ``REJECTED`` counts the rejections kept since then (as capped, from
    ``ix_rejections_received_at``) in the same query.
    """
    scope = conditions(Filters(endpoint=filters.endpoint, since=filters.since, until=filters.until))
    parts = []
    for status in STATUSES:
        counted = capped_count(select(literal(1).label("one")).where(Event.status == status, *scope))
        parts.append(select(literal(status).label("status"), counted.label("n")))
    if rejected_since is not None:
        counted = capped_count(select(literal(1).label("one")).where(Rejection.received_at >= rejected_since))
        parts.append(select(literal(REJECTED).label("status"), counted.label("n")))
    return union_all(*parts)


def status_counts(session: Session, filters: Filters, rejected_since: datetime | None = None) -> dict[str, int]:
    """``counts_query`` run: one query."""
    return {status: int(n) for status, n in session.execute(counts_query(filters, rejected_since))}


def object_history(session: Session, event: Event, limit: int = 50) -> tuple[Object | None, list[Event]]:
    """The current state of the event's object and the events that moved it, newest version first."""
    if not event.object_type or not event.object_id:
        return None, []
    obj = session.get(Object, (event.endpoint, event.object_type, event.object_id))
    moved = session.scalars(
        select(Event)
        .where(
            Event.object_id == event.object_id, Event.endpoint == event.endpoint, Event.object_type == event.object_type
        )
        .order_by(Event.object_version.desc().nulls_last(), Event.received_at.desc())
        .limit(limit)
    ).all()
    return obj, list(moved)


@dataclass(frozen=True)
class Received:
    """The delivery an event came in: its exact signed body and its stored headers."""

    body: bytes
    headers: dict[str, str]


def received(session: Session, event: Event) -> Received:
    """The event's delivery: its own row's, or for a batch item the body kept once in ``bodies``
    (an item whose body was lost shows its own item and no headers)."""
    if event.body_digest is None:
        return Received(event.payload, event.headers)
    found = session.get(Body, (event.endpoint, event.body_digest))
    return Received(event.payload, {}) if found is None else Received(found.body, found.headers)


def attempts(session: Session, endpoint: str, event_id: str) -> list[Attempt]:
    return list(
        session.scalars(
            select(Attempt).where(Attempt.endpoint == endpoint, Attempt.event_id == event_id).order_by(Attempt.number)
        )
    )


def replays_of(session: Session, event: Event, limit: int = 100) -> list[Replay]:
    """The replays that included ``event``, newest first: one query on the ``at`` index from the
    event's receipt, matching inside each record's ``event_ids`` with the database's JSON."""
    query = select(Replay).where(Replay.at >= event.received_at).order_by(Replay.at.desc(), Replay.id.desc())
    pair = [event.endpoint, event.event_id]
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        query = query.where(type_coerce(Replay.event_ids, JSONB).contains([pair]))
    elif dialect == "sqlite":
        item = func.json_each(Replay.event_ids).table_valued("value").alias("item")
        query = query.where(
            exists(
                select(1)
                .select_from(item)
                .where(
                    func.json_extract(item.c.value, "$[0]") == event.endpoint,
                    func.json_extract(item.c.value, "$[1]") == event.event_id,
                )
            )
        )
    else:  # any other database: read the candidates and match here
        return [r for r in session.scalars(query) if pair in r.event_ids][:limit]
    return list(session.scalars(query.limit(limit)))


def replays(session: Session, limit: int = 100, before: int | None = None) -> list[Replay]:
    query = select(Replay).order_by(Replay.id.desc()).limit(limit)
    if before is not None:
        query = query.where(Replay.id < before)
    return list(session.scalars(query))
