"""Settling a forwarded delivery: what one send came to, applied under its lease's token.

A 2xx or a bus's acknowledgement delivers (and, for an ordered destination, raises the object's
newest version sent); a 429 or 503 with ``Retry-After`` throttles the destination without spending
an attempt; a 410 pauses it; anything else spends an attempt (``retry_schedule``, then ``failed``) and counts toward the
circuit, unless the circuit is open already: then it is a failed probe, and only a real probe
(``Lease.probe``) doubles the wait for the next. Every result adds its ``delivery_attempts`` row.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session, sessionmaker

from webhooks.configuration.destinations import MAX_PROBE_SECONDS, Destination
from webhooks.engines import upsert
from webhooks.forward.deliveries import EXCERPT, MAX_THROTTLE_SECONDS, PENDING, object_key, state_of
from webhooks.forward.leases import Lease, Result
from webhooks.storable import storable_text
from webhooks.tables.forwarding import Delivery, DeliveryAttempt, DestinationState, ForwardedObject
from webhooks.vocabulary import DeliveryStatus, Outcome


def _outcome(result: Result, state: DestinationState) -> Outcome:
    if result.delivered:
        return Outcome.DELIVERED
    if result.status in (429, 503) and result.retry_after is not None:
        return Outcome.THROTTLED
    if result.status == 410:
        return Outcome.GONE
    return Outcome.PROBE_FAILED if state.opened_at is not None else Outcome.ERROR


def settle(
    sessions: sessionmaker[Session], destination: Destination, results: Iterable[Result], now: datetime
) -> list[Outcome | None]:
    """Apply each result under its lease's token, in one transaction; the outcome of each (None:
    its lease was taken back, by a replay, and the result changed nothing)."""
    outcomes: list[Outcome | None] = []
    with sessions.begin() as session:
        state = state_of(session, destination.name)
        results = list(results)
        rows = _locked(session, destination.name, [(r.lease.endpoint, r.lease.event_id) for r in results])
        sent: dict[tuple[str, str, str, str], int] = {}  # ordered: each object's newest version delivered
        for result in results:
            delivery = rows.get((result.lease.endpoint, result.lease.event_id))
            if delivery is None or delivery.lease != result.lease.token or delivery.status != PENDING:
                outcomes.append(None)
                continue
            outcome = _outcome(result, state)
            _apply(session, destination, state, delivery, result, outcome, now)
            version = delivery.object_version
            if outcome is Outcome.DELIVERED and destination.ordered and delivery.object_id and version is not None:
                sent[object_key(delivery)] = max(sent.get(object_key(delivery), version), version)
            outcomes.append(outcome)
        _forwarded(session, sent)
    return outcomes


INTERRUPTED_WHY = "interrupted: the worker stopped past WEBHOOKS_STOP_TIMEOUT with this send under way"


def interrupt(sessions: sessionmaker[Session], flying: Iterable[tuple[Lease, datetime]], now: datetime) -> int:
    """Release the deliveries whose sends were under way when their worker's stop timeout passed:
    each still ``pending`` and due at once, its lease taken back (the token moves on, so a late
    result settles nothing), with an ``interrupted`` attempt that spends nothing. How many."""
    released = 0
    by_destination: dict[str, list[tuple[Lease, datetime]]] = {}
    for lease, started_at in flying:
        by_destination.setdefault(lease.destination, []).append((lease, started_at))
    with sessions.begin() as session:
        for name, sends in sorted(by_destination.items()):
            rows = _locked(session, name, [(lease.endpoint, lease.event_id) for lease, _ in sends])
            for lease, started_at in sends:
                delivery = rows.get((lease.endpoint, lease.event_id))
                if delivery is None or delivery.lease != lease.token or delivery.status != PENDING:
                    continue
                delivery.lease += 1
                delivery.leased_until, delivery.last_status_code, delivery.last_error = None, None, INTERRUPTED_WHY
                session.add(
                    DeliveryAttempt(
                        endpoint=delivery.endpoint,
                        event_id=delivery.event_id,
                        destination=name,
                        number=delivery.attempts,
                        started_at=started_at,
                        seconds=max(0.0, (now - started_at).total_seconds()),
                        outcome=Outcome.INTERRUPTED,
                        status_code=None,
                        error=INTERRUPTED_WHY,
                        response=None,
                    )
                )
                released += 1
    return released


def _locked(session: Session, name: str, keys: list[tuple[str, str]]) -> dict[tuple[str, str], Delivery]:
    """The deliveries of ``keys`` to ``name``, loaded fresh and locked in one statement (in key
    order, so two settles never wait on each other crosswise)."""
    if not keys:
        return {}
    query = (
        select(Delivery)
        .where(Delivery.destination == name, tuple_(Delivery.endpoint, Delivery.event_id).in_(keys))
        .order_by(Delivery.endpoint, Delivery.event_id)
        .with_for_update()
    )
    found = session.scalars(query, execution_options={"populate_existing": True}).all()
    return {(d.endpoint, d.event_id): d for d in found}


def _error(result: Result) -> str | None:
    if result.error is not None:
        return storable_text(result.error)[:2000]
    if result.status is not None and not 200 <= result.status < 300:
        return f"HTTP {result.status}"
    return None


def _apply(
    session: Session,
    destination: Destination,
    state: DestinationState,
    delivery: Delivery,
    result: Result,
    outcome: Outcome,
    now: datetime,
) -> None:
    delivery.leased_until = None
    delivery.last_status_code, delivery.last_error = result.status, _error(result)
    if outcome is Outcome.DELIVERED:
        delivery.attempts += 1
        delivery.status, delivery.status_at, delivery.delivered_at = DeliveryStatus.DELIVERED, now, now
        state.failures, state.opened_at, state.probe_at, state.probe_seconds = 0, None, None, None
        state.last_success_at = now
    elif outcome is Outcome.THROTTLED:
        wait = min(MAX_THROTTLE_SECONDS, max(0.0, result.retry_after or 0.0))
        state.throttled_until = now + timedelta(seconds=wait)
    elif outcome is Outcome.GONE:
        state.paused, state.paused_reason = True, "the destination answered 410 Gone: resume it once it is back"
    elif outcome is Outcome.PROBE_FAILED:
        # A request leased before the circuit opened and answered since was no probe: the wait stays.
        if result.lease.probe:
            state.probe_seconds = min(MAX_PROBE_SECONDS, 2 * (state.probe_seconds or destination.probe_seconds))
            state.probe_at = now + timedelta(seconds=state.probe_seconds)
    else:
        delivery.attempts += 1
        if delivery.attempts >= destination.max_attempts:
            delivery.status, delivery.status_at = DeliveryStatus.FAILED, now
        else:
            wait = destination.retry_schedule[delivery.attempts - 1]
            delivery.next_attempt_at = now + timedelta(seconds=wait)
        state.failures += 1
        if state.failures >= destination.circuit_failures:
            state.opened_at, state.probe_seconds = now, destination.probe_seconds
            state.probe_at = now + timedelta(seconds=destination.probe_seconds)
    if outcome is not Outcome.DELIVERED:
        state.last_error = f"{now.isoformat(timespec='seconds')} {delivery.event_id}: {delivery.last_error}"[:2000]
    session.add(
        DeliveryAttempt(
            endpoint=delivery.endpoint,
            event_id=delivery.event_id,
            destination=delivery.destination,
            number=delivery.attempts,
            started_at=result.started_at,
            seconds=result.seconds,
            outcome=outcome,
            status_code=result.status,
            error=delivery.last_error,
            response=None if result.response is None else storable_text(result.response)[:EXCERPT],
        )
    )


def _forwarded(session: Session, sent: dict[tuple[str, str, str, str], int]) -> None:
    """Each object's newest version the destination has: only ever raised (one statement a settle)."""
    if not sent:
        return
    insert = upsert(session, ForwardedObject).values(
        [
            {"destination": d, "endpoint": e, "object_type": t, "object_id": i, "version": version}
            for (d, e, t, i), version in sent.items()
        ]
    )
    session.execute(
        insert.on_conflict_do_update(
            index_elements=[c.name for c in ForwardedObject.__table__.primary_key],
            set_={"version": insert.excluded.version},
            where=ForwardedObject.version < insert.excluded.version,
        )
    )
