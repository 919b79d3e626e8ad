"""What each configured destination has waiting, and its state: read by the admin API, the console
and the metrics at scrape time.

Three statements whatever the history's size: the ``destinations`` rows, the pending deliveries
(through a partial index of pending rows) and the failed ones (through a partial index of failed
rows, capped at ``COUNT_CAP + 1`` each: a count above ``COUNT_CAP`` means at least that many). Delivered rows are
never read for the pending count. A destination never sent to has no row yet: it is ``active`` with nothing waiting.

``held``: the names whose pending deliveries no configured destination may send (removed, or
configured again at another URL; ``webhooks.forward.held.held``), one statement. A configured
name's ``pending`` counts every pending delivery under it, held ones too: nothing waits unseen.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, literal, select, union_all

from webhooks.configuration.destinations import Destination
from webhooks.forward.held import held as held_deliveries
from webhooks.tables.events import capped_count
from webhooks.tables.forwarding import Delivery, DestinationState
from webhooks.timestamps import aware
from webhooks.vocabulary import DeliveryStatus

ACTIVE, PAUSED, OPEN = "active", "paused", "open"  # a destination's ``state`` word


@dataclass(frozen=True)
class Backlog:
    """One destination now (``oldest_pending_seconds``: how long its oldest pending delivery has
    waited since it was created or replayed; None when nothing is pending)."""

    name: str
    state: str
    pending: int = 0
    failed: int = 0
    oldest_pending_seconds: float | None = None
    last_success_at: datetime | None = None
    last_error: str | None = None
    opened_at: datetime | None = None  # the circuit (open even while paused)
    throttled_until: datetime | None = None
    paused_reason: str | None = None


def _word(row: Any) -> str:
    if row is None:
        return ACTIVE
    if row.paused:
        return PAUSED
    return OPEN if row.opened_at is not None else ACTIVE


def pending_query(names: Sequence[str]) -> Any:
    """Per destination: its pending deliveries and the oldest one's ``status_at``, read through a
    partial index of pending rows (``ix_deliveries_due``, or ``ix_deliveries_object``: the planner's pick)."""
    return (
        select(Delivery.destination, func.count(), func.min(Delivery.status_at))
        .where(Delivery.status == DeliveryStatus.PENDING, Delivery.destination.in_(names))
        .group_by(Delivery.destination)
    )


def failed_query(names: Sequence[str]) -> Any:
    """Per destination: its failed deliveries, counted up to ``COUNT_CAP + 1`` (failed rows are
    kept until purged, so they grow with the history) from the partial index of failed rows
    (``ix_deliveries_failed``): one bounded range per destination."""
    parts = [
        select(
            literal(name).label("destination"),
            capped_count(
                select(literal(1)).where(Delivery.status == DeliveryStatus.FAILED, Delivery.destination == name)
            ).label("n"),
        )
        for name in names
    ]
    return union_all(*parts)


def backlogs(db: Any, names: Sequence[str], now: datetime) -> list[Backlog]:
    """``names`` (the configured destinations, in that order), each with its counts; ``db``: a
    ``Session`` or a ``Connection``."""
    if not names:
        return []
    state = DestinationState
    columns = (state.name, state.paused, state.paused_reason, state.opened_at, state.throttled_until)
    states = {
        r.name: r
        for r in db.execute(select(*columns, state.last_success_at, state.last_error).where(state.name.in_(names)))
    }
    pending = {name: (count, oldest) for name, count, oldest in db.execute(pending_query(names))}
    failed = dict(db.execute(failed_query(names)).all())
    found = []
    for name in names:
        row = states.get(name)
        count, oldest = pending.get(name, (0, None))
        found.append(
            Backlog(
                name=name,
                state=_word(row),
                pending=int(count),
                failed=int(failed.get(name, 0)),
                oldest_pending_seconds=None if oldest is None else max(0.0, (now - aware(oldest)).total_seconds()),
                last_success_at=None if row is None else row.last_success_at,
                last_error=None if row is None else row.last_error,
                opened_at=None if row is None else row.opened_at,
                throttled_until=None if row is None else row.throttled_until,
                paused_reason=None if row is None else row.paused_reason,
            )
        )
    return found


@dataclass(frozen=True)
class Held:
    """Deliveries waiting under ``name`` that no configured destination may send until an operator
    adopts or fails them."""

    name: str
    pending: int
    oldest_pending_at: datetime | None


def held(db: Any, configured: Mapping[str, Destination]) -> list[Held]:
    """Every name with held deliveries, by name; ``db``: a ``Session`` or a ``Connection``."""
    query = (
        select(Delivery.destination, func.count(), func.min(Delivery.status_at))
        .where(held_deliveries(configured))
        .group_by(Delivery.destination)
        .order_by(Delivery.destination)
    )
    return [Held(name, int(n), None if oldest is None else aware(oldest)) for name, n, oldest in db.execute(query)]
