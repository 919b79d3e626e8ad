"""Replay: put events back on the queue, one or many, and write who did it and why to the audit log.

Shared by the pages, the JSON API and the CLI. A replay marks the rows ``queued`` and writes its
audit record in one transaction, then enqueues a fresh job per row (``JobQueue.requeue``); the
worker's claim decides the rest, so replaying twice is harmless. An event being processed right
now is left alone (a single replay says so: 409). When Redis refuses, the replay stands: the rows
not enqueued go back to ``received`` and the sweeper queues them once Redis is back
(``Outcome.queued`` is then False).
"""

from __future__ import annotations

import collections
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime

import redis
from sqlalchemy import func, select, tuple_, update
from sqlalchemy.orm import Session

from webhooks.admin.queries import Filters, conditions, storable
from webhooks.errors import WebhooksError
from webhooks.metrics import ENQUEUE_FAILURES
from webhooks.models import Event, Replay
from webhooks.runtime import Runtime
from webhooks.words import Status

log = logging.getLogger(__name__)
NO_REASON = "(no reason given)"
CHUNK = 500  # ids per UPDATE … IN (…)
PENDING = "replay recorded; Redis is unavailable, so the sweeper will queue it when Redis is back"
BULK_LIMIT = 10_000  # one request replays at most this many; narrow the filter for more


class ReplayError(WebhooksError):
    """A replay that cannot be done; ``reason`` is the API's error code, ``status`` its HTTP status."""

    def __init__(self, reason: str, status: int) -> None:
        super().__init__(reason)
        self.reason, self.status = reason, status


@dataclass
class Outcome:
    count: int
    dry_run: bool
    event_ids: list[tuple[str, str]] = field(default_factory=list)
    replay_id: int | None = None
    queued: bool = True  # False: Redis refused; recorded, and the sweeper queues the rows later


def _check_reason(reason: str | None) -> None:
    if reason is not None and not storable(reason):
        raise ReplayError("bad_reason", 400)  # NUL or a lone surrogate: PostgreSQL cannot store it


def _audit(session: Session, who: str, reason: str, filters: dict[str, str], ids: list[tuple[str, str]]) -> int:
    entry = Replay(at=datetime.now(UTC), who=who, reason=reason, filter=filters, count=len(ids),
                   event_ids=[list(pair) for pair in ids])
    session.add(entry)
    session.flush()
    return entry.id


def _mark(session: Session, ids: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``queued`` for each id not ``processing``, in the caller's transaction; returns those marked."""
    marked: list[tuple[str, str]] = []
    for start in range(0, len(ids), CHUNK):
        marked += [(p, e) for p, e in session.execute(
            update(Event)
            .where(tuple_(Event.endpoint, Event.event_id).in_(ids[start:start + CHUNK]),
                   Event.status != Status.PROCESSING)
            .values(status=Status.QUEUED, status_at=datetime.now(UTC))
            .returning(Event.endpoint, Event.event_id)
        )]
    order = {pair: n for n, pair in enumerate(ids)}
    return sorted(marked, key=order.__getitem__)


def _enqueue(rt: Runtime, ids: list[tuple[str, str]]) -> bool:
    """A fresh job for each committed id; False when Redis refused (the rest go back to ``received``)."""
    for position, (endpoint, event_id) in enumerate(ids):
        try:
            rt.queue.requeue(endpoint, event_id)
        except redis.RedisError as exc:
            log.warning("replay recorded, enqueue failed (%s): the sweeper queues %d event(s) later",
                        exc.__class__.__name__, len(ids) - position)
            _leave_for_sweeper(rt, ids[position:])
            return False
    return True


def _leave_for_sweeper(rt: Runtime, ids: list[tuple[str, str]]) -> None:
    """``queued`` → ``received``, as the receiver does when Redis refuses. Best effort: a row left
    ``queued`` without a job is found by the sweeper too."""
    for endpoint, count in collections.Counter(endpoint for endpoint, _ in ids).items():
        ENQUEUE_FAILURES.labels(endpoint).inc(count)
    try:
        with rt.sessions.begin() as session:
            for start in range(0, len(ids), CHUNK):
                session.execute(
                    update(Event)
                    .where(tuple_(Event.endpoint, Event.event_id).in_(ids[start:start + CHUNK]),
                           Event.status == Status.QUEUED)
                    .values(status=Status.RECEIVED, status_at=datetime.now(UTC))
                )
    except Exception:  # the replay stands either way; the sweeper also takes `queued` rows
        log.warning("could not mark replayed events received; the sweeper finds them queued", exc_info=True)


def replay_one(rt: Runtime, endpoint: str, event_id: str, *, who: str, reason: str | None) -> Outcome:
    """Replay one event. Raises ``ReplayError`` (404 unknown, 409 being processed, 400 ``bad_reason``)."""
    _check_reason(reason)
    if not (storable(endpoint) and storable(event_id)):
        raise ReplayError("not_found", 404)  # no database could hold it, so no such event
    with rt.sessions.begin() as session:
        event = session.get(Event, (endpoint, event_id), with_for_update=True)
        if event is None:
            raise ReplayError("not_found", 404)
        if event.status == Status.PROCESSING:
            raise ReplayError("in_progress", 409)
        event.status, event.status_at = Status.QUEUED, datetime.now(UTC)
        ids = [(endpoint, event_id)]
        replay_id = _audit(session, who, (reason or "").strip() or NO_REASON,  # the filter as the API lists it
                           {"provider": endpoint, "event_id": event_id}, ids)
    return Outcome(1, False, ids, replay_id, queued=_enqueue(rt, ids))


def matching_count(rt: Runtime, filters: Filters) -> int:
    """How many events a bulk replay of ``filters`` would replay now (the dry run)."""
    with rt.sessions() as session:
        query = select(func.count()).select_from(Event).where(
            *conditions(filters, rt.settings.endpoints), Event.status != Status.PROCESSING
        )
        return int(session.scalar(query) or 0)


def replay_matching(rt: Runtime, filters: Filters, *, who: str, reason: str | None, dry_run: bool) -> Outcome:
    """Replay every event matching ``filters`` (not ``processing``), or only count them.

    A real run needs a reason and an explicit filter, and stops at ``BULK_LIMIT`` events.
    """
    if dry_run:
        return Outcome(matching_count(rt, filters), True)
    _check_reason(reason)
    if not (reason or "").strip():
        raise ReplayError("reason_required", 400)
    if not filters.as_dict():
        raise ReplayError("filter_required", 400)  # "replay everything" is never a misclick away
    with rt.sessions() as session:
        ids = [(p, e) for p, e in session.execute(
            select(Event.endpoint, Event.event_id)
            .where(*conditions(filters, rt.settings.endpoints), Event.status != Status.PROCESSING)
            .order_by(Event.received_at, Event.endpoint, Event.event_id)  # oldest first, as they came
            .limit(BULK_LIMIT + 1)
        )]
    if len(ids) > BULK_LIMIT:
        raise ReplayError("too_many", 400)
    with rt.sessions.begin() as session:  # all or nothing: the rows and their audit record
        done = _mark(session, ids)
        replay_id = _audit(session, who, str(reason).strip(), filters.as_dict(), done)
    return Outcome(len(done), False, done, replay_id, queued=_enqueue(rt, done))
