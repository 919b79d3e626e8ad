"""Retention: ``webhooks purge --older-than 30d`` deletes finished events, in batches.

A purged event leaves a tombstone (its id and replay key, in the same transaction), and the
database skips any insert of a tombstoned id or replay key: a late retry or a captured delivery of
a purged event is a duplicate, never a new event. Tombstones are kept far longer than events
(``--tombstones-older-than``, default the longer of 365 days and twice the failed window), then
expire; a window shorter than the longest retry horizon among the provider kinds in use is still
refused unless ``--force``. Failed events are kept twice as long by default
(``--failed-older-than``), for replay. Unfinished rows (received, queued, processing) are never
purged, nor is an event still being forwarded (a ``pending`` delivery reads its body); its
deliveries and their attempts go with it. A multi-event delivery's body (``bodies``) goes with the
last of its events.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import click
from sqlalchemy import delete, func, select, tuple_
from sqlalchemy.orm import Session, sessionmaker

from webhooks import recent
from webhooks.engines import upsert
from webhooks.errors import ConfigError, WebhooksError
from webhooks.models import Body, Delivery, DeliveryAttempt, Duplicate, Event, Tombstone
from webhooks.providers import PROVIDERS
from webhooks.providers.base import Provider, duration_seconds
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

    def tombstone_window(self) -> timedelta:
        """How long a purged event's tombstone is kept: longer than any event of this plan."""
        if self.tombstones_older_than is not None:
            return self.tombstones_older_than
        return max(TOMBSTONE_DAYS, 2 * self.failed_older_than, 2 * self.older_than)


def purge(
    sessions: sessionmaker[Session],
    plan: Plan,
    *,
    kinds: set[str],
    force: bool = False,
    now: datetime | None = None,
    progress: Callable[[int], None] | None = None,
    total: Callable[[int], None] | None = None,
) -> int:
    """Delete finished events older than the plan's windows; returns how many were deleted."""
    with sessions() as session:
        kinds = kinds | set(session.scalars(select(Event.kind).distinct()))
    longest, which = horizon(kinds)
    if not force and min(plan.older_than, plan.failed_older_than) < longest:
        raise PurgeRefusedError(
            f"a window shorter than {which}'s retry horizon ({longest.days} d {longest.seconds // 3600} h) "
            "lets a late retry in as a new event; use --force to purge anyway"
        )
    moment = now or datetime.now(UTC)
    forwarding = select(Delivery.event_id).where(
        Delivery.endpoint == Event.endpoint,
        Delivery.event_id == Event.event_id,
        Delivery.status == DeliveryStatus.PENDING,
    )
    condition = (
        (Event.status.in_(FINISHED) & (Event.received_at < moment - plan.older_than))
        | ((Event.status == Status.FAILED) & (Event.received_at < moment - plan.failed_older_than))
    ) & ~forwarding.exists()
    with sessions() as session:
        count = session.scalar(select(func.count()).select_from(Event).where(condition)) or 0
    if total is not None:
        total(count)
    deleted = 0
    while True:
        with sessions.begin() as session:
            found = session.execute(
                select(Event.endpoint, Event.event_id, Event.replay_key, Event.body_digest)
                .where(condition)
                .limit(plan.batch_size)
            ).all()
            if not found:
                break
            _bury(session, found, moment)
        deleted += len(found)
        if progress is not None:
            progress(len(found))
    expire_tombstones(sessions, moment - plan.tombstone_window(), plan.batch_size)
    return deleted


def _bury(session: Session, found: Sequence[Any], moment: datetime) -> None:
    """Delete these events, leaving their tombstones, and the bodies no event refers to any more."""
    session.execute(
        upsert(session, Tombstone).on_conflict_do_nothing(),
        [
            {"endpoint": endpoint, "event_id": event_id, "replay_key": key, "purged_at": moment}
            for endpoint, event_id, key, _ in found
        ],
    )
    keys = [(endpoint, event_id) for endpoint, event_id, _, _ in found]
    session.execute(delete(Event).where(tuple_(Event.endpoint, Event.event_id).in_(keys)))
    for table in (Duplicate, Delivery, DeliveryAttempt):
        session.execute(delete(table).where(tuple_(table.endpoint, table.event_id).in_(keys)))
    digests = {(endpoint, digest) for endpoint, _, _, digest in found if digest is not None}
    if digests:
        still = select(Event.event_id).where(Event.endpoint == Body.endpoint, Event.body_digest == Body.digest)
        session.execute(delete(Body).where(tuple_(Body.endpoint, Body.digest).in_(list(digests)), ~still.exists()))


def expire_tombstones(sessions: sessionmaker[Session], before: datetime, batch_size: int = 1000) -> int:
    """Delete the tombstones of events purged before ``before``; returns how many."""
    expired = 0
    while True:
        with sessions.begin() as session:
            keys = session.execute(
                select(Tombstone.endpoint, Tombstone.event_id).where(Tombstone.purged_at < before).limit(batch_size)
            ).all()
            if not keys:
                return expired
            session.execute(
                delete(Tombstone).where(tuple_(Tombstone.endpoint, Tombstone.event_id).in_([tuple(k) for k in keys]))
            )
        expired += len(keys)
        recent.forget_everywhere()  # these ids may be new again: this process asks the database


@click.command("purge")
@click.option("--older-than", required=True, help="Delete processed/ignored events older than this (30d, 12h…).")
@click.option("--failed-older-than", help="Delete failed events older than this [default: 2 × older-than]")
@click.option("--batch-size", default=1000, show_default=True, type=click.IntRange(1, 100_000))
@click.option(
    "--tombstones-older-than",
    help="Forget purged ids older than this [default: the longer of 365d and 2 × each window]",
)
@click.option("--force", is_flag=True, help="Purge even inside a provider's retry horizon.")
def purge_command(
    older_than: str, failed_older_than: str | None, batch_size: int, tombstones_older_than: str | None, force: bool
) -> None:
    """Delete old finished events, in batches (never unfinished ones), leaving tombstones."""
    from webhooks import config
    from webhooks.engines import make_engine, make_sessionmaker

    try:
        settings = config.load()
        window = parse_age(older_than)
        plan = Plan(
            window,
            parse_age(failed_older_than) if failed_older_than else 2 * window,
            batch_size,
            parse_age(tombstones_older_than) if tombstones_older_than else None,
        )
        if plan.tombstone_window() < max(plan.older_than, plan.failed_older_than):
            raise ConfigError("--tombstones-older-than must be at least as long as the events' windows")
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    engine = make_engine(settings.database_url)
    kinds = {endpoint.kind for endpoint in settings.endpoints.values()}
    bars: list[Any] = []  # click's ProgressBar, opened once the count is known

    def start(count: int) -> None:
        bars.append(click.progressbar(length=count, label=f"purging {count} events").__enter__())

    try:
        deleted = purge(
            make_sessionmaker(engine), plan, kinds=kinds, force=force, total=start, progress=lambda n: bars[0].update(n)
        )
    except PurgeRefusedError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        if bars:
            bars[0].__exit__(None, None, None)
        engine.dispose()
    click.echo(f"deleted {deleted} events")
