"""Replay to a destination: send events' deliveries to one destination again, instead of processing
the events again.

The deliveries are set pending (forced: sent even if the destination has a newer version of the
object; attempts reset) and the audit record is written, in one transaction; the record's
``filter`` names the destination. A processed event with no delivery there (processed before the
destination was configured, or filtered out) gets one: a backfill. Failed or queued events get
none: their processing has not happened, and a delivery exists only for what was processed. A
delivery in flight is left alone. Then this process's forwarder is nudged.

The destination's ``events`` globs and ``filter`` apply, as they are now, on each event as handlers
see it: an event they refuse is left out (``refused``) unless the operator forces the replay, and
then the audit record says ``"forced": true``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, exists, or_
from sqlalchemy.orm import Session

from webhooks.configuration.destinations import Destination
from webhooks.forward import deliveries
from webhooks.forward.dispatcher import nudge
from webhooks.forward.filtering import refusal, stored_view
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


def refused(session: Session, destination: Destination, keys: Sequence[Key]) -> dict[Key, str]:
    """The keys ``destination``'s ``events`` globs or filter refuse now, each with the reason."""
    if not destination.events and destination.filter is None:
        return {}
    out = {}
    for key in keys:
        row = session.get(Event, key)
        why = refusal(destination, stored_view(session, row)) if row is not None else None
        if why is not None:
            out[key] = why
    return out


def resend(
    rt: Runtime,
    keys: Sequence[Key],
    destination: str,
    audit: dict[str, Any],
    now: datetime,
    *,
    force: bool = False,
    refusals: dict[Key, str] | None = None,
) -> tuple[list[Key], int | None]:
    """Set the keys' deliveries to ``destination`` pending (backfilling) and write the audit
    record (its filter gains ``destination``), together; the keys set, and the record's id (None,
    and no record, when none was set). Unless ``force``, the keys the destination refuses are left
    out, each with its reason in ``refusals``."""
    audit = audit | {"filter": audit["filter"] | {"destination": destination}}
    if force:
        audit["filter"] |= {"forced": True}
    with rt.sessions.begin() as session:
        configured = rt.settings.destinations[destination]
        target = configured.identity  # the operator sends them to this one
        if not force:
            left_out = refused(session, configured, keys)
            if refusals is not None:
                refusals.update(left_out)
            keys = [k for k in keys if k not in left_out]
        done = deliveries.replay(session, keys, destination, now, backfill=True, target=target)
        replay_id = audit_record(session, audit, done, now) if done else None
    if done:
        nudge()
    return done, replay_id
