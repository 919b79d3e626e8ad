"""Replay: put events back on the queue, one or many, and write who did it and why to the audit log.

Shared by the pages, the JSON API and the CLI. A replay marks the rows ``queued`` and writes its
audit record in one transaction (``Store.replay``), then enqueues a fresh job per row
(``outbox.enqueue``); the
worker's claim decides the rest, so replaying twice is harmless. An event being processed right
now is left alone (a single replay says so: 409). When Redis refuses, the replay stands: the rows
not enqueued go back to ``received`` and the sweeper queues them once Redis is back
(``Outcome.queued`` is then False). With ``destination``, the events are not processed again: their
deliveries to that destination are sent again (``webhooks.admin.resend``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select

from webhooks.admin import resend
from webhooks.admin.queries import Filters, conditions, storable
from webhooks.errors import WebhooksError
from webhooks.receiver import outbox
from webhooks.runtime import Runtime
from webhooks.store.transitions import REPLAY
from webhooks.tables.events import Event
from webhooks.tables.forwarding import Delivery

log = logging.getLogger(__name__)
NO_REASON = "(no reason given)"
PENDING = "replay recorded; Redis is unavailable, so the sweeper will queue it when Redis is back"
BULK_LIMIT = 10_000  # one request replays at most this many; narrow the filter for more


class ReplayError(WebhooksError):
    """A replay that cannot be done; ``reason`` is the API's error code, ``status`` its HTTP status."""

    def __init__(self, reason: str, status: int, detail: str | None = None) -> None:
        super().__init__(reason)
        self.reason, self.status, self.detail = reason, status, detail


@dataclass
class Outcome:
    count: int
    dry_run: bool
    event_ids: list[tuple[str, str]] = field(default_factory=list)
    replay_id: int | None = None
    queued: bool = True  # False: Redis refused; recorded, and the sweeper queues the rows later
    refused: dict[tuple[str, str], str] = field(default_factory=dict)  # left out: the destination refuses them


def _check_reason(reason: str | None) -> None:
    if reason is not None and not storable(reason):
        raise ReplayError("bad_reason", 400)  # NUL or a lone surrogate: PostgreSQL cannot store it


def check_destination(rt: Runtime, destination: Any) -> str | None:
    """None (process the events again), or the configured destination to send them to again;
    raises ``ReplayError`` (400 ``unknown_destination``)."""
    if destination is None:
        return None
    if not isinstance(destination, str) or destination not in rt.settings.destinations:
        raise ReplayError("unknown_destination", 400)
    return destination


def replay_one(
    rt: Runtime,
    endpoint: str,
    event_id: str,
    *,
    who: str,
    reason: str | None,
    destination: str | None = None,
    force: bool = False,
) -> Outcome:
    """Replay one event, or with ``destination`` send its delivery there again. Raises
    ``ReplayError`` (404 unknown; 409 ``in_progress``: being processed, or its delivery in flight;
    409 ``not_processed``: no delivery there to send; 409 ``filtered``: the destination's ``events``
    or ``filter`` refuses it now, and ``force`` was not given; 400 ``bad_reason``,
    ``unknown_destination``)."""
    _check_reason(reason)
    destination = check_destination(rt, destination)
    if not (storable(endpoint) and storable(event_id)):
        raise ReplayError("not_found", 404)  # no database could hold it, so no such event
    audit = {
        "who": who,
        "reason": (reason or "").strip() or NO_REASON,
        "filter": {"provider": endpoint, "event_id": event_id},
    }  # the filter as the API lists it
    if destination is not None:
        refusals: dict[tuple[str, str], str] = {}
        now = datetime.now(UTC)
        ids, replay_id = resend.resend(
            rt, [(endpoint, event_id)], destination, audit, now, force=force, refusals=refusals
        )
        if refusals:
            why = refusals[(endpoint, event_id)]
            raise ReplayError("filtered", 409, f"{destination} refuses it now ({why}); force to send it anyway")
        if not ids:  # no such event, its delivery is in flight, or it was never processed
            raise _not_resent(rt, endpoint, event_id, destination)
        return Outcome(1, False, ids, replay_id)
    ids, replay_id = rt.store.replay([(endpoint, event_id)], audit, datetime.now(UTC), every=True)
    if not ids:  # nothing changed: no such event, or it is being processed
        raise (
            ReplayError("not_found", 404)
            if rt.store.status((endpoint, event_id)) is None
            else ReplayError("in_progress", 409)
        )
    return Outcome(1, False, ids, replay_id, queued=outbox.enqueue(rt, ids, fresh=True))


def _not_resent(rt: Runtime, endpoint: str, event_id: str, destination: str) -> ReplayError:
    if rt.store.status((endpoint, event_id)) is None:
        return ReplayError("not_found", 404)
    with rt.sessions() as session:
        held = session.get(Delivery, (endpoint, event_id, destination)) is not None
    return ReplayError("in_progress" if held else "not_processed", 409)


def _replayable(rt: Runtime, filters: Filters, destination: str | None) -> list[Any]:
    """The conditions on ``events`` of what a bulk replay would replay (or re-send) now."""
    which = (
        Event.status.in_(REPLAY.sources) if destination is None else resend.resendable(destination, datetime.now(UTC))
    )
    return [*conditions(filters, rt.settings.endpoints), which]


def matching_count(rt: Runtime, filters: Filters, destination: str | None = None) -> int:
    """How many events a bulk replay of ``filters`` would replay now, or re-send to ``destination``
    (the dry run)."""
    with rt.sessions() as session:
        query = select(func.count()).select_from(Event).where(*_replayable(rt, filters, destination))
        return int(session.scalar(query) or 0)


def replay_matching(
    rt: Runtime,
    filters: Filters,
    *,
    who: str,
    reason: str | None,
    dry_run: bool,
    destination: str | None = None,
    force: bool = False,
) -> Outcome:
    """Replay every event matching ``filters`` (not ``processing``), or re-send their deliveries to
    ``destination``, or only count them.

    A real run needs a reason and an explicit filter, and stops at ``BULK_LIMIT`` events.
    """
    destination = check_destination(rt, destination)
    if dry_run:
        return Outcome(matching_count(rt, filters, destination), True)
    _check_reason(reason)
    if not (reason or "").strip():
        raise ReplayError("reason_required", 400)
    if not filters.as_dict():
        raise ReplayError("filter_required", 400)  # "replay everything" is never a misclick away
    with rt.sessions() as session:
        ids = [
            (p, e)
            for p, e in session.execute(
                select(Event.endpoint, Event.event_id)
                .where(*_replayable(rt, filters, destination))
                .order_by(Event.received_at, Event.endpoint, Event.event_id)  # oldest first, as they came
                .limit(BULK_LIMIT + 1)
            )
        ]
    if len(ids) > BULK_LIMIT:
        raise ReplayError("too_many", 400)
    audit = {"who": who, "reason": str(reason).strip(), "filter": filters.as_dict()}
    if destination is not None:
        refusals: dict[tuple[str, str], str] = {}
        done, replay_id = resend.resend(rt, ids, destination, audit, datetime.now(UTC), force=force, refusals=refusals)
        return Outcome(len(done), False, done, replay_id, refused=refusals)
    done, replay_id = rt.store.replay(ids, audit, datetime.now(UTC))  # the rows and their record, together
    return Outcome(len(done), False, done, replay_id, queued=outbox.enqueue(rt, done, fresh=True))
