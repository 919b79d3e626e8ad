"""Retention: ``webhooks purge --older-than 30d`` deletes finished events, in batches.

A purged event leaves a tombstone (its id and replay key, committed just before the event goes), and the
database skips any insert of a tombstoned id or replay key: a late retry or a captured delivery of
a purged event is a duplicate, never a new event. Tombstones are kept far longer than events
(``--tombstones-older-than``, default the longer of 365 days and twice the failed window), then
expire; a window shorter than the longest retry horizon among the provider kinds in use is still
refused unless ``--force``. Failed events are kept twice as long by default
(``--failed-older-than``), for replay. Unfinished rows (received, queued, processing) are never
purged, nor is an event still being forwarded (a ``pending`` delivery reads its body); its
processing attempts, deliveries and their attempts go with it. A multi-event delivery's body (``bodies``) goes with the
last of its events.

The purge yields to ingest: keyset batches per status (never re-reading what it deleted), two
short transactions each (tombstones, then the delete), and a pause after each in proportion to
its own time (``Plan.yield_ratio``, ``--pause``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, literal, or_, select, text, tuple_
from sqlalchemy.orm import Session, sessionmaker

from webhooks.engines import upsert
from webhooks.errors import ConfigError, WebhooksError
from webhooks.providers import PROVIDERS
from webhooks.providers.base import Provider, duration_seconds
from webhooks.store import recent
from webhooks.tables.events import Attempt, Body, Duplicate, Event, Tombstone, capped_count
from webhooks.tables.forwarding import Delivery, DeliveryAttempt
from webhooks.vocabulary import DeliveryStatus, Status

# Each kind's retry horizon is its provider class's ``retry_horizon``; a kind no longer
# registered (still present in ``events``) gets the base class's: the longest, 30 days.
UNKNOWN = Provider.retry_horizon
FINISHED = (Status.PROCESSED, Status.IGNORED)


class PurgeRefusedError(WebhooksError):
    """The window would let a late provider retry in as a new event."""


def parse_age(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``3600s``, ``2w`` (or plain seconds)."""
    try:
        return timedelta(seconds=duration_seconds(text))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def horizon(kinds: set[str]) -> tuple[timedelta, str | None]:
    """The longest retry horizon of these kinds, and the kind that sets it."""
    longest, which = timedelta(0), None
    for kind in sorted(kinds):
        value = PROVIDERS[kind].retry_horizon if kind in PROVIDERS else UNKNOWN
        if value > longest:
            longest, which = value, kind
    return longest, which


TOMBSTONE_DAYS = timedelta(days=365)


@dataclass(frozen=True)
class Plan:
    older_than: timedelta
    failed_older_than: timedelta
    batch_size: int = 1000
    tombstones_older_than: timedelta | None = None  # None: the default (``tombstone_window``)
    # Seconds of pause after each batch per second the batch took: 1.0 leaves the database to
    # ingest half the time (0: no pause, a purge as fast as the database deletes).
    yield_ratio: float = 1.0

    def tombstone_window(self) -> timedelta:
        """How long a purged event's tombstone is kept: longer than any event of this plan."""
        if self.tombstones_older_than is not None:
            return self.tombstones_older_than
        return max(TOMBSTONE_DAYS, 2 * self.failed_older_than, 2 * self.older_than)


Key = tuple[datetime, str, str]


def _forwarding() -> Any:
    """An event still being forwarded: a ``pending`` delivery reads its body."""
    return (
        select(Delivery.event_id)
        .where(
            Delivery.endpoint == Event.endpoint,
            Delivery.event_id == Event.event_id,
            Delivery.status == DeliveryStatus.PENDING,
        )
        .exists()
    )


STORED_ENDPOINTS = text(
    "WITH RECURSIVE e(endpoint) AS (SELECT min(endpoint) FROM events UNION ALL"
    " SELECT (SELECT min(endpoint) FROM events WHERE endpoint > e.endpoint) FROM e WHERE e.endpoint IS NOT NULL)"
    " SELECT endpoint FROM e WHERE endpoint IS NOT NULL"
)


def stored_kinds(session: Session) -> set[str]:
    """The kinds of the endpoints that have stored events: one primary-key seek per endpoint
    name (a skip scan) and one row's ``kind`` each, not a scan of the table (an endpoint's
    rows share its kind; configure another kind under another name)."""
    names = session.scalars(STORED_ENDPOINTS).all()
    first = select(Event.kind).order_by(Event.event_id).limit(1)  # ordered: a seek of the primary key
    return {kind for name in names if (kind := session.scalar(first.where(Event.endpoint == name)))}


def purge(
    sessions: sessionmaker[Session],
    plan: Plan,
    *,
    kinds: set[str],
    force: bool = False,
    now: datetime | None = None,
    progress: Callable[[int], None] | None = None,
    total: Callable[[int], None] | None = None,
    pause: Callable[[float], None] = time.sleep,
) -> int:
    """Delete finished events older than the plan's windows; returns how many were deleted.

    Each status is walked in keyset order of ``ix_events_status_feed`` (``status, received_at,
    endpoint, event_id``), each batch starting after the last key of the one before: no batch
    re-reads the entries the previous ones deleted. A batch is two short transactions — its
    tombstones, then its delete — and is followed by ``pause(yield_ratio × its own time)``.
    ``total`` gets the count up front, capped at ``COUNT_CAP + 1`` (more: "at least that")."""
    with sessions() as session:
        kinds = kinds | stored_kinds(session)
    longest, which = horizon(kinds)
    if not force and min(plan.older_than, plan.failed_older_than) < longest:
        raise PurgeRefusedError(
            f"a window shorter than {which}'s retry horizon ({longest.days} d {longest.seconds // 3600} h) "
            "lets a late retry in as a new event; use --force to purge anyway"
        )
    moment = now or datetime.now(UTC)
    walks = [(status, moment - plan.older_than) for status in FINISHED]
    walks.append((Status.FAILED, moment - plan.failed_older_than))
    if total is not None:
        due = [(Event.status == status) & (Event.received_at < cutoff) for status, cutoff in walks]
        with sessions() as session:
            total(session.scalar(select(capped_count(select(literal(1)).where(or_(*due), ~_forwarding())))) or 0)
    deleted = 0
    for status, cutoff in walks:
        after: Key | None = None
        while True:
            started = time.monotonic()
            found, after = _batch(sessions, status, cutoff, after, plan.batch_size)
            if after is None:
                break
            buried = _bury(sessions, status, found, moment) if found else 0
            deleted += buried
            if progress is not None and buried:
                progress(buried)
            pause(plan.yield_ratio * (time.monotonic() - started))
    expire_tombstones(sessions, moment - plan.tombstone_window(), plan.batch_size, plan.yield_ratio, pause)
    return deleted


def _batch(
    sessions: sessionmaker[Session], status: str, cutoff: datetime, after: Key | None, size: int
) -> tuple[list[Any], Key | None]:
    """The next ``size`` expired rows of ``status`` after ``after`` (those still being forwarded
    left out), and the key to continue from (None: nothing left)."""
    key = tuple_(Event.received_at, Event.endpoint, Event.event_id)
    query = (
        select(Event.received_at, Event.endpoint, Event.event_id, Event.replay_key, Event.body_digest, _forwarding())
        .where(Event.status == status, Event.received_at < cutoff)
        .order_by(Event.received_at, Event.endpoint, Event.event_id)
        .limit(size)
    )
    if after is not None:
        query = query.where(Event.received_at >= after[0], key > after)
    with sessions() as session:
        rows = session.execute(query).all()
    if not rows:
        return [], None
    last = rows[-1]
    return [r for r in rows if not r[5]], (last[0], last[1], last[2])


def _among(endpoint: Any, ident: Any, keys: Sequence[tuple[str, str]]) -> ColumnElement[bool]:
    """``(endpoint, ident) IN keys``, with each column's own ``IN`` beside it: SQLite runs a bare
    row-value ``IN`` list as a scan of the whole table, but seeks a primary key on two ``IN``
    lists (the row values then only sort out the pairs)."""
    pairs = list(keys)
    return and_(
        endpoint.in_(sorted({e for e, _ in pairs})),
        ident.in_(sorted({i for _, i in pairs})),
        tuple_(endpoint, ident).in_(pairs),
    )


def _bury(sessions: sessionmaker[Session], status: str, found: Sequence[Any], moment: datetime) -> int:
    """Tombstones for these events, committed first (an insert racing the delete then already
    sees them: the trigger skips it); then, in a second short transaction, the events still in
    ``status`` and not being forwarded, their duplicates' counts, processing attempts, deliveries
    and delivery attempts, and
    the bodies no event refers to any more. Returns how many events were deleted."""
    with sessions.begin() as session:
        session.execute(
            upsert(session, Tombstone).on_conflict_do_nothing(),
            [
                {"endpoint": endpoint, "event_id": event_id, "replay_key": replay_key, "purged_at": moment}
                for _, endpoint, event_id, replay_key, _, _ in found
            ],
        )
    keys = [(endpoint, event_id) for _, endpoint, event_id, _, _, _ in found]
    with sessions.begin() as session:
        gone = session.execute(
            delete(Event)
            .where(_among(Event.endpoint, Event.event_id, keys), Event.status == status, ~_forwarding())
            .returning(Event.endpoint, Event.event_id, Event.body_digest)
        ).all()
        deleted = [(endpoint, event_id) for endpoint, event_id, _ in gone]
        kept = set(keys) - set(deleted)  # replayed or claimed for forwarding meanwhile: alive, no tombstone
        if kept:
            session.execute(delete(Tombstone).where(_among(Tombstone.endpoint, Tombstone.event_id, list(kept))))
        if not gone:
            return 0
        for table in (Duplicate, Attempt, Delivery, DeliveryAttempt):
            session.execute(delete(table).where(_among(table.endpoint, table.event_id, deleted)))
        digests = {(endpoint, digest) for endpoint, _, digest in gone if digest is not None}
        if digests:
            still = select(Event.event_id).where(Event.endpoint == Body.endpoint, Event.body_digest == Body.digest)
            session.execute(delete(Body).where(_among(Body.endpoint, Body.digest, list(digests)), ~still.exists()))
    return len(gone)


def expire_tombstones(
    sessions: sessionmaker[Session],
    before: datetime,
    batch_size: int = 1000,
    yield_ratio: float = 0.0,
    pause: Callable[[float], None] = time.sleep,
) -> int:
    """Delete the tombstones of events purged before ``before``; returns how many. Batches walk
    ``ix_tombstones_purged`` in keyset order (one purge run stamps its tombstones with one time)."""
    expired = 0
    key = tuple_(Tombstone.purged_at, Tombstone.endpoint, Tombstone.event_id)
    after: Key | None = None
    while True:
        started = time.monotonic()
        query = (
            select(Tombstone.purged_at, Tombstone.endpoint, Tombstone.event_id)
            .where(Tombstone.purged_at < before)
            .order_by(Tombstone.purged_at, Tombstone.endpoint, Tombstone.event_id)
            .limit(batch_size)
        )
        if after is not None:
            query = query.where(Tombstone.purged_at >= after[0], key > after)
        with sessions.begin() as session:
            found = session.execute(query).all()
            if not found:
                return expired
            session.execute(
                delete(Tombstone).where(_among(Tombstone.endpoint, Tombstone.event_id, [(e, i) for _, e, i in found]))
            )
        after = (found[-1][0], found[-1][1], found[-1][2])
        expired += len(found)
        recent.forget_everywhere()  # these ids may be new again: this process asks the database
        pause(yield_ratio * (time.monotonic() - started))
