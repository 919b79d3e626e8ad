"""Forwarded deliveries' life: created with the event's processing, leased, settled (both databases).

::

    (new) ──create──▶ pending ──settle──▶ delivered | failed (attempts spent)
    pending ──supersede──▶ superseded   (ordered: the destination has a newer version of the object)
    any ──replay──▶ pending             (operator; forced: sent even if not newer)

``create`` runs in the transaction that marks the event, so a delivery exists exactly when its
event was processed, once per (event, destination): the primary key ignores a second insert.
``lease`` takes due deliveries for one destination under its ``destinations`` row's lock (so
several workers never exceed ``max_in_flight`` or the rate budget), in flight until
``leased_until``: a worker killed mid-request leaves a lease that expires, and the delivery is
sent again with the same ``webhook-id``. ``webhooks.forward.settle`` applies what came back, under
the lease's token, with the destination's circuit, throttle and pause.

A delivery carries the identity of the destination it was made for (``target``,
``Destination.identity``); it is leased only by a destination of that identity (the others are
held: ``webhooks.forward.held``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, exists, func, or_, select, text, tuple_, update
from sqlalchemy.orm import Session, aliased, sessionmaker

from webhooks.configuration.destinations import Destination
from webhooks.engines import upsert
from webhooks.forward.leases import Lease
from webhooks.forward.signing import Message, message_id
from webhooks.tables.events import Event
from webhooks.tables.forwarding import Delivery, DeliveryAttempt, DestinationState, ForwardedObject
from webhooks.timestamps import aware
from webhooks.vocabulary import DeliveryStatus, Outcome, Status

LEASE_MARGIN = 5.0  # seconds past twice the timeout before a lease counts as lost (the worker died)
MAX_THROTTLE_SECONDS = 3600.0  # a Retry-After is obeyed up to an hour
EXCERPT = 1000  # characters of an answer's body kept with its attempt
PENDING = DeliveryStatus.PENDING


def create(
    session: Session, event: Any, destinations: Mapping[str, str], now: datetime, traceparent: str | None = None
) -> None:
    """One pending delivery per destination for the event being marked (insert-or-ignore).
    ``event``: a ``webhooks.worker.handlers.HandlerEvent`` (its endpoint, id, type, object and version);
    ``destinations``: name → identity (``Destination.identity``) of each destination it goes to;
    ``traceparent``: the job's span, which each forward continues (``webhooks.tracing``)."""
    rows = [
        {
            "endpoint": event.endpoint,
            "event_id": event.event_id,
            "destination": name,
            "message_id": message_id(event.endpoint, event.event_id, name),
            "status": PENDING,
            "event_type": event.type,
            "object_type": event.object_type,
            "object_id": event.object_id,
            "object_version": event.version,
            "forced": False,
            "attempts": 0,
            "lease": 0,
            "next_attempt_at": now,
            "created_at": now,
            "status_at": now,
            "target": destinations[name],
            "traceparent": traceparent,
        }
        for name in destinations
    ]
    if rows:
        session.execute(upsert(session, Delivery).values(rows).on_conflict_do_nothing())


def state_of(session: Session, name: str) -> DestinationState:
    """The destination's row, locked for this transaction (created on first use: the insert is
    only tried when the row is missing, one statement a turn instead of two)."""
    query = select(DestinationState).where(DestinationState.name == name).with_for_update()
    found = session.scalars(query, execution_options={"populate_existing": True}).one_or_none()
    if found is not None:
        return found
    session.execute(
        upsert(session, DestinationState).values(name=name, paused=False, failures=0).on_conflict_do_nothing()
    )
    return session.scalars(query, execution_options={"populate_existing": True}).one()


def made_for(destination: Destination, delivery: Any = Delivery) -> Any:
    """The condition on ``delivery`` (the model or an alias): made for this destination (its name and
    identity; a row older than 0014 has no identity and is the name's)."""
    return and_(
        delivery.destination == destination.name,
        or_(delivery.target.is_(None), delivery.target == destination.identity),
    )


def _due(destination: Destination, now: datetime) -> Any:
    conditions = [
        made_for(destination),
        Delivery.status == PENDING,
        Delivery.next_attempt_at <= now,
        or_(Delivery.leased_until.is_(None), Delivery.leased_until <= now),
    ]
    if destination.ordered:  # the head of its object's line, and nothing of that object in flight
        other = aliased(Delivery)
        same = and_(
            made_for(destination, other),
            other.status == PENDING,
            other.endpoint == Delivery.endpoint,
            other.object_type == Delivery.object_type,
            other.object_id == Delivery.object_id,
            or_(other.endpoint != Delivery.endpoint, other.event_id != Delivery.event_id),
        )
        mine, theirs = func.coalesce(Delivery.object_version, -1), func.coalesce(other.object_version, -1)
        before = or_(
            theirs < mine,
            and_(
                theirs == mine,
                or_(
                    other.created_at < Delivery.created_at,
                    and_(other.created_at == Delivery.created_at, other.event_id < Delivery.event_id),
                ),
            ),
        )
        conditions.append(
            or_(Delivery.object_id.is_(None), ~exists().where(same, or_(before, other.leased_until > now)))
        )
    return (
        select(Delivery, Event.payload, Event.headers, Event.body_digest)
        .join(Event, and_(Event.endpoint == Delivery.endpoint, Event.event_id == Delivery.event_id))
        .where(*conditions)
        .order_by(Delivery.next_attempt_at, Delivery.created_at)
    )


def _capacity(state: DestinationState, destination: Destination, in_flight: int, free: int, now: datetime) -> int:
    if state.paused or (state.throttled_until is not None and aware(state.throttled_until) > now):
        return 0
    if state.opened_at is not None:  # the circuit is open: one probe when due, nothing else
        due = state.probe_at is None or aware(state.probe_at) <= now
        return 1 if due and not in_flight and free else 0
    room = min(free, destination.max_in_flight - in_flight)
    if destination.rate_limit is not None:
        rate = destination.rate_limit
        burst = max(1.0, rate)  # a second's worth, and at least one request (rate_limit = 0.5: one per 2 s)
        tokens = burst if state.tokens is None or state.tokens_at is None else state.tokens
        if state.tokens_at is not None:
            tokens = min(burst, tokens + rate * max(0.0, (now - aware(state.tokens_at)).total_seconds()))
        state.tokens, state.tokens_at = tokens, now
        room = min(room, math.floor(tokens))
    return max(0, room)


def _content_type(headers: dict[str, str] | None, body_digest: str | None) -> str:
    if body_digest is None:  # the signed body as received: its own type
        for name, value in (headers or {}).items():
            if name.lower() == "content-type":
                return value
    return "application/json"  # one event of a batch: its item as JSON


def lease(sessions: sessionmaker[Session], destination: Destination, free: int, now: datetime) -> list[Lease]:
    """Take up to ``free`` due deliveries of ``destination`` for sending; ordered destinations'
    deliveries that are not newer than what the destination has are superseded here."""
    leased: list[Lease] = []
    with sessions.begin() as session:
        if session.get_bind().dialect.name == "postgresql":
            # A lease lost with its unflushed WAL (a database crash) leaves the delivery pending under
            # its old token: it is sent again with the same webhook-id, and the lost send's result
            # settles nothing. The settle's commit flushes it in any case.
            session.execute(text("SET LOCAL synchronous_commit TO off"))
        state = state_of(session, destination.name)
        in_flight = session.scalar(
            select(func.count()).where(
                Delivery.destination == destination.name, Delivery.status == PENDING, Delivery.leased_until > now
            )
        )
        room = _capacity(state, destination, int(in_flight or 0), free, now)
        if not room:
            return []
        until = now + timedelta(seconds=2 * destination.timeout_seconds + LEASE_MARGIN)
        for _ in range(5):  # superseded rows free the head of their object's line: look again
            rows = session.execute(_due(destination, now).limit(room - len(leased))).all()
            superseded = False
            newest = _newest(session, [r[0] for r in rows]) if destination.ordered else {}
            for delivery, payload, headers, body_digest in rows:
                if _not_newer(newest, delivery):
                    _supersede(session, delivery, now)
                    superseded = True
                    continue
                delivery.lease += 1
                delivery.leased_until = until
                leased.append(_leased(delivery, payload, headers, body_digest, probe=state.opened_at is not None))
            if not superseded or len(leased) >= room:
                break
            session.flush()
        if destination.rate_limit is not None and state.tokens is not None:
            state.tokens -= len(leased)
    return leased


def _leased(
    delivery: Delivery, payload: bytes, headers: dict[str, str] | None, body_digest: str | None, *, probe: bool
) -> Lease:
    message = Message(
        delivery.message_id,
        delivery.endpoint,
        delivery.event_id,
        delivery.event_type,
        delivery.object_type,
        delivery.object_id,
        delivery.object_version,
        _content_type(headers, body_digest),
    )
    return Lease(
        delivery.endpoint,
        delivery.event_id,
        delivery.destination,
        delivery.lease,
        delivery.attempts,
        delivery.forced,
        message,
        bytes(payload),
        probe,
        delivery.traceparent,
    )


def object_key(delivery: Delivery) -> tuple[str, str, str, str]:
    return (delivery.destination, delivery.endpoint, delivery.object_type or "", delivery.object_id or "")


def _newest(session: Session, rows: list[Delivery]) -> dict[tuple[str, str, str, str], int]:
    """The newest version the destination has of each of these deliveries' objects (one statement)."""
    keys = list({object_key(d) for d in rows if d.object_id is not None})
    if not keys:
        return {}
    o = ForwardedObject
    found = session.execute(
        select(o.destination, o.endpoint, o.object_type, o.object_id, o.version).where(
            tuple_(o.destination, o.endpoint, o.object_type, o.object_id).in_(keys)
        )
    )
    return {(d, e, t, i): v for d, e, t, i, v in found}


def _not_newer(newest: dict[tuple[str, str, str, str], int], delivery: Delivery) -> bool:
    if delivery.forced or delivery.object_id is None or delivery.object_version is None:
        return False
    sent = newest.get(object_key(delivery))
    return sent is not None and sent >= delivery.object_version


def _supersede(session: Session, delivery: Delivery, now: datetime) -> None:
    delivery.status, delivery.status_at, delivery.leased_until = DeliveryStatus.SUPERSEDED, now, None
    session.add(
        DeliveryAttempt(
            endpoint=delivery.endpoint,
            event_id=delivery.event_id,
            destination=delivery.destination,
            number=delivery.attempts,
            started_at=now,
            seconds=0.0,
            outcome=Outcome.SUPERSEDED,
            error="not sent: the destination has already received a newer version of the object",
        )
    )


def due(sessions: sessionmaker[Session], destinations: Iterable[Destination], now: datetime) -> int:
    """How many deliveries to these destinations are due now (those of a paused one are not, nor
    those of one whose circuit is open until a probe still to come, nor held ones)."""
    waiting = select(DestinationState.name).where(or_(DestinationState.paused, DestinationState.probe_at > now))
    ours = [made_for(d) for d in destinations]
    if not ours:
        return 0
    with sessions() as session:
        query = select(func.count()).where(
            or_(*ours),
            Delivery.destination.not_in(waiting),
            Delivery.status == PENDING,
            Delivery.next_attempt_at <= now,
        )
        return int(session.scalar(query) or 0)


# ===== operators ===============================================================================
def replay(
    session: Session,
    keys: Sequence[tuple[str, str]],
    destination: str,
    now: datetime,
    *,
    backfill: bool = False,
    target: str | None = None,
) -> list[tuple[str, str]]:
    """Send these events' deliveries to ``destination`` again (forced: even if superseded, attempts
    reset, with the object version the event's row holds); the keys whose delivery was set pending
    (one in flight is left alone). ``backfill``: a processed event with no delivery there
    (processed before the destination was configured, or filtered out) gets one, pending and
    forced. ``target``: the identity of the destination now configured under the name, which the
    operator sends them to (None: left as it is)."""
    done = []
    again: dict[str, Any] = {
        "status": PENDING,
        "status_at": now,
        "forced": True,
        "attempts": 0,
        "next_attempt_at": now,
        "leased_until": None,
    }
    if target is not None:
        again["target"] = target
    # The version the event's row holds now: a delivery created before the fold's version reached
    # deliveries (SQLite, up to eea6681, gave an Adyen CAPTURE version 1) is sent as what it is.
    event_version = (
        select(Event.object_version)
        .where(Event.endpoint == Delivery.endpoint, Event.event_id == Delivery.event_id)
        .scalar_subquery()
    )
    again["object_version"] = func.coalesce(event_version, Delivery.object_version)
    for endpoint, event_id in keys:
        changed: Any = session.execute(
            update(Delivery)
            .where(
                Delivery.endpoint == endpoint,
                Delivery.event_id == event_id,
                Delivery.destination == destination,
                or_(Delivery.status != PENDING, Delivery.leased_until.is_(None), Delivery.leased_until <= now),
            )
            .values(again)
        )
        if changed.rowcount or (backfill and _backfill(session, endpoint, event_id, destination, now, target)):
            done.append((endpoint, event_id))
    return done


def _backfill(
    session: Session, endpoint: str, event_id: str, destination: str, now: datetime, target: str | None
) -> bool:
    """Create the forced delivery of a processed event that has none for ``destination``."""
    event = session.get(Event, (endpoint, event_id))
    if event is None or event.status != Status.PROCESSED:
        return False
    row = {
        "endpoint": endpoint,
        "event_id": event_id,
        "destination": destination,
        "message_id": message_id(endpoint, event_id, destination),
        "status": PENDING,
        "event_type": event.event_type,
        "object_type": event.object_type,
        "object_id": event.object_id,
        "object_version": event.object_version,
        "forced": True,
        "attempts": 0,
        "lease": 0,
        "next_attempt_at": now,
        "created_at": now,
        "status_at": now,
        "target": target,
    }
    inserted: Any = session.execute(upsert(session, Delivery).values([row]).on_conflict_do_nothing())
    return bool(inserted.rowcount)


def pause(sessions: sessionmaker[Session], name: str, paused: bool, reason: str | None) -> None:
    """An operator's pause (``reason``) or resume; a resume also closes the circuit and ends a throttle."""
    with sessions.begin() as session:
        state = state_of(session, name)
        state.paused, state.paused_reason = paused, reason if paused else None
        if not paused:
            state.failures, state.opened_at, state.probe_at, state.probe_seconds = 0, None, None, None
            state.throttled_until = None
