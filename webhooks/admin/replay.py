"""Replay: put events back on the queue, one or many, and write who did it and why to the audit log.

Shared by the pages, the JSON API and the CLI. A replay marks the row ``queued`` and enqueues a
fresh job (``JobQueue.requeue``); the worker's claim decides the rest, so replaying twice is
harmless. An event being processed right now is left alone (a single replay says so: 409).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import func, select, tuple_, update

from webhooks.admin.queries import Filters, conditions, storable
from webhooks.models import Event, Replay
from webhooks.runtime import Runtime

NO_REASON = "(no reason given)"
BULK_LIMIT = 10_000  # one request replays at most this many; narrow the filter for more


class ReplayError(Exception):
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


def _check_reason(reason: str | None) -> None:
    if reason is not None and not storable(reason):
        raise ReplayError("bad_reason", 400)  # NUL or a lone surrogate: PostgreSQL cannot store it


def _audit(rt: Runtime, who: str, reason: str, filters: dict[str, str], ids: list[tuple[str, str]]) -> int:
    with rt.sessions.begin() as session:
        entry = Replay(at=datetime.now(UTC), who=who, reason=reason, filter=filters, count=len(ids),
                       event_ids=[list(pair) for pair in ids])
        session.add(entry)
        session.flush()
        return entry.id


def _mark_and_enqueue(rt: Runtime, ids: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """queued + a fresh job for each id not ``processing``; returns the ids actually replayed."""
    done: list[tuple[str, str]] = []
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        with rt.sessions.begin() as session:
            marked = session.execute(
                update(Event)
                .where(tuple_(Event.provider, Event.event_id).in_(chunk), Event.status != "processing")
                .values(status="queued", status_at=datetime.now(UTC))
                .returning(Event.provider, Event.event_id)
            ).all()
        for provider, event_id in marked:
            rt.queue.requeue(provider, event_id)
            done.append((provider, event_id))
    return done


def replay_one(rt: Runtime, provider: str, event_id: str, *, who: str, reason: str | None) -> Outcome:
    """Replay one event. Raises ``ReplayError`` (404 unknown, 409 being processed, 400 ``bad_reason``)."""
    _check_reason(reason)
    if not (storable(provider) and storable(event_id)):
        raise ReplayError("not_found", 404)  # no database could hold it, so no such event
    with rt.sessions.begin() as session:
        event = session.get(Event, (provider, event_id), with_for_update=True)
        if event is None:
            raise ReplayError("not_found", 404)
        if event.status == "processing":
            raise ReplayError("in_progress", 409)
        event.status, event.status_at = "queued", datetime.now(UTC)
    rt.queue.requeue(provider, event_id)
    ids = [(provider, event_id)]
    replay_id = _audit(rt, who, (reason or "").strip() or NO_REASON, {"provider": provider, "event_id": event_id}, ids)
    return Outcome(1, False, ids, replay_id)


def matching_count(rt: Runtime, filters: Filters) -> int:
    """How many events a bulk replay of ``filters`` would replay now (the dry run)."""
    with rt.sessions() as session:
        query = select(func.count()).select_from(Event).where(
            *conditions(filters, rt.settings.endpoints), Event.status != "processing"
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
            select(Event.provider, Event.event_id)
            .where(*conditions(filters, rt.settings.endpoints), Event.status != "processing")
            .order_by(Event.received_at, Event.provider, Event.event_id)  # oldest first, as they came
            .limit(BULK_LIMIT + 1)
        )]
    if len(ids) > BULK_LIMIT:
        raise ReplayError("too_many", 400)
    done = _mark_and_enqueue(rt, ids)
    replay_id = _audit(rt, who, str(reason).strip(), filters.as_dict(), done)
    return Outcome(len(done), False, done, replay_id)
