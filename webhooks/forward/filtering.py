"""Which of an event's destinations its filters let through (#42): evaluated when the event's
deliveries are created, in the processing transaction, on the event as handlers see it. An event a
filter refuses gets no delivery there and is counted (``webhooks_forward_filtered_total``); so on an
``ordered`` destination a refused version never holds back a later one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from webhooks import metrics
from webhooks.configuration import filters
from webhooks.configuration.destinations import Destination
from webhooks.tables.events import Body, Event


def kept(
    session: Session,
    destinations: Mapping[str, Destination],
    names: Sequence[str],
    event: Any,
) -> list[str]:
    """``names`` without the destinations whose filter refuses ``event`` (a ``HandlerEvent``)."""
    if not any(destinations[name].filter is not None for name in names):
        return list(names)
    headers = (
        stored_headers(session, event.endpoint, event.event_id) if any(_reads(destinations[n]) for n in names) else {}
    )
    seen = filters.view(event.data, headers, event.type, event.endpoint, event.object_type, event.object_id)
    out = []
    for name in names:
        rule = destinations[name].filter
        if rule is None or rule.matches(seen):
            out.append(name)
        else:
            metrics.FORWARD_FILTERED.labels(name).inc()
    return out


def _reads(destination: Destination) -> bool:
    return destination.filter is not None and destination.filter.uses_headers


def stored_view(session: Session, row: Event) -> dict[str, Any]:
    """What a filter sees of stored event ``row``: its data as handlers see it (a batch's item), its
    request headers as stored, its own fields."""
    from webhooks.providers import PROVIDERS  # (providers import the forwarder's neighbours: late)

    data = PROVIDERS[row.kind].event_data(row.payload, None if row.body_digest is not None else row.item_index)
    headers = stored_headers(session, row.endpoint, row.event_id)
    return filters.view(data, headers, row.event_type, row.endpoint, row.object_type, row.object_id)


def refusal(destination: Destination, seen: Mapping[str, Any]) -> str | None:
    """What refuses an event (``filters.view``) at ``destination`` now: the ``events`` glob, or the
    filter's first refusing clause; None when it would take it."""
    if not destination.wants(seen["type"]):
        return f"type {seen['type']!r} is not in events {list(destination.events)}"
    return destination.filter.why_not(seen) if destination.filter is not None else None


def stored_headers(session: Session, endpoint: str, event_id: str) -> dict[str, str]:
    """The event's request headers as stored (a batch's are its delivery's, in ``bodies``)."""
    row = session.execute(
        select(Event.headers, Body.headers)
        .outerjoin(Body, (Body.endpoint == Event.endpoint) & (Body.digest == Event.body_digest))
        .where(Event.endpoint == endpoint, Event.event_id == event_id)
    ).first()
    if row is None:
        return {}
    own, delivery = row
    return dict(delivery if delivery is not None else own or {})
