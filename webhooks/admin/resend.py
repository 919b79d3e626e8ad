"""Replay to a destination: send events' deliveries to one destination again, instead of processing
the events again.

The deliveries are set pending (forced: sent even if the destination has a newer version of the
object; attempts reset) and the audit record is written, in one transaction; the record's
``filter`` names the destination. A processed event with no delivery there (processed before the
destination was configured, or filtered out) gets one: a backfill. Failed or queued events get
none: their processing has not happened, and a delivery exists only for what was processed. A
delivery in flight is left alone. Then this process's forwarder is nudged.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, exists, or_

from webhooks.forward import deliveries
from webhooks.forward.dispatcher import nudge
from webhooks.runtime import Runtime
from webhooks.store import Key
from webhooks.store.sql import audit_record
from webhooks.tables.events import Event
from webhooks.tables.forwarding import Delivery
from webhooks.vocabulary import DeliveryStatus, Status


def resendable(destination: str, now: datetime) -> Any:
    """The condition on ``events`` of what a replay to ``destination`` would send now: a delivery
    there not in flight, or none yet and the event processed (the backfill)."""
    mine = and_(
        Delivery.endpoint == Event.endpoint, Delivery.event_id == Event.event_id, Delivery.destination == destination
    )
    in_flight = exists().where(mine, Delivery.status == DeliveryStatus.PENDING, Delivery.leased_until > now)
    return and_(or_(exists().where(mine), Event.status == Status.PROCESSED), ~in_flight)


def resend(
    rt: Runtime, keys: Sequence[Key], destination: str, audit: dict[str, Any], now: datetime
) -> tuple[list[Key], int | None]:
    """Set the keys' deliveries to ``destination`` pending (backfilling) and write the audit
    record (its filter gains ``destination``), together; the keys set, and the record's id (None,
    and no record, when none was set)."""
    audit = audit | {"filter": audit["filter"] | {"destination": destination}}
    with rt.sessions.begin() as session:
        target = rt.settings.destinations[destination].identity  # the operator sends them to this one
        done = deliveries.replay(session, keys, destination, now, backfill=True, target=target)
        replay_id = audit_record(session, audit, done, now) if done else None
    if done:
        nudge()
    return done, replay_id
