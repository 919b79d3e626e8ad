"""Held deliveries: a destination removed, or configured again under its name at another URL,
leaves its pending deliveries *held*: listed (``webhooks.forward.backlog.held``), kept, and sent
only once an operator ``adopt``s them (the destination now under the name takes them) or
``fail_held``s them. A delivery is made for one destination identity (``target``,
``Destination.identity``; ``webhooks.forward.deliveries.made_for``)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session

from webhooks.configuration.destinations import Destination
from webhooks.tables.forwarding import Delivery
from webhooks.vocabulary import DeliveryStatus

PENDING = DeliveryStatus.PENDING


def held(configured: Mapping[str, Destination]) -> Any:
    """The condition on ``deliveries`` of pending rows no configured destination may send: their
    name is not configured, or is configured at another identity (another URL)."""
    others = [
        and_(Delivery.destination == name, Delivery.target.is_not(None), Delivery.target != d.identity)
        for name, d in configured.items()
    ]
    return and_(Delivery.status == PENDING, or_(Delivery.destination.not_in(list(configured)), *others))


def _held_keys(session: Session, name: str, configured: Mapping[str, Destination]) -> list[tuple[str, str]]:
    query = select(Delivery.endpoint, Delivery.event_id).where(held(configured), Delivery.destination == name)
    return [(e, i) for e, i in session.execute(query.order_by(Delivery.endpoint, Delivery.event_id))]


def adopt(session: Session, name: str, configured: Mapping[str, Destination], now: datetime) -> list[tuple[str, str]]:
    """An operator's word: the destination now configured under ``name`` takes the deliveries held
    under that name (due now, their attempts kept); the keys adopted."""
    destination = configured[name]
    keys = _held_keys(session, name, configured)
    if keys:
        session.execute(
            update(Delivery)
            .where(held(configured), Delivery.destination == name)
            .values(target=destination.identity, next_attempt_at=now)  # one still in flight: after its lease
        )
    return keys


def fail_held(
    session: Session, name: str, configured: Mapping[str, Destination], now: datetime
) -> list[tuple[str, str]]:
    """An operator's word: the deliveries held under ``name`` are ``failed``, never sent (a replay to
    a configured destination can still send one); the keys failed."""
    keys = _held_keys(session, name, configured)
    if keys:
        session.execute(
            update(Delivery)
            .where(held(configured), Delivery.destination == name)
            .values(
                status=DeliveryStatus.FAILED,
                status_at=now,
                leased_until=None,
                last_error="failed by an operator: its destination is no longer configured",
            )
        )
    return keys
