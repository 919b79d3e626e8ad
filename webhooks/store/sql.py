"""What both adapters do through SQLAlchemy: the operations with no hand-built fast path
(replay, the sweeper's queries, leaving rows for the sweeper, the replayed-signature check, a
failed attempt, a dismissed one). ``SqliteStore`` and ``PostgresStore`` extend it with their own paths."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Column, ColumnElement, Engine, Table, TextClause, bindparam, or_, select, tuple_, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from webhooks.engines import deferred, make_sessionmaker
from webhooks.store import attempts
from webhooks.store.base import Claimed, Inserts, Key
from webhooks.store.rejections import count_rejection
from webhooks.store.sql_rows import SqlInserts
from webhooks.store.transitions import ABANDON, FAIL, INTERRUPT, LEAVE, MARK, RENEW, REPLAY, REQUEUE, Move, values
from webhooks.tables.events import Attempt, Event, Replay, Tombstone, unfinished
from webhooks.vocabulary import INTERRUPTED, DeliveryStatus, Reason, Status

log = logging.getLogger(__name__)
CHUNK = 500  # keys per UPDATE … IN (…)
SWEEP_PAGE = 500  # stranded rows a page (their jobs checked a page per Redis round trip)
ABANDONED = "AbandonedJobError: the attempt's lease ran out (its worker died, or stopped renewing it)"
STALE = "StaleClaimError: the attempt outlived its claim (its lease ran out or a newer claim took over)"


def audit_record(session: Session, audit: dict[str, Any], marked: list[Key], now: datetime) -> int:
    """Add a replay's ``replays`` row (``audit``: who, reason, filter) in ``session``; its id."""
    entry = Replay(at=now, count=len(marked), event_ids=[list(pair) for pair in marked], **audit)
    session.add(entry)
    session.flush()
    return entry.id


class _Refused(Exception):
    """An all-or-nothing replay that could not mark every key: its transaction is rolled back."""


# ===== the worker's shared part: the claimed row's columns, a failure under the claim's token ===
EVENTS: Table = Event.__table__  # type: ignore[assignment]  # a Table (mypy sees a FromClause)
CLAIMED: tuple[Column[Any], ...] = tuple(EVENTS.c[name] for name in Claimed._fields)  # what a claim returns


def bound(moved: dict[str, object]) -> dict[str, object]:
    """A move's values (``transitions.values``) as the parameters of a statement built once
    (``status=bindparam("b_status")``, ``status_at=bindparam("b_status_at")``)."""
    return {f"b_{k}": v for k, v in moved.items()}


def under_claim(move: Move) -> tuple[ColumnElement[bool], ...]:
    """The row of ``b_endpoint`` / ``b_event_id`` still held by the claim whose token is
    ``b_attempt``, in a status ``move`` leaves: only the latest claim's holder may move it."""
    return (
        Event.endpoint == bindparam("b_endpoint"),
        Event.event_id == bindparam("b_event_id"),
        Event.status.in_(move.sources),
        Event.attempts == bindparam("b_attempt"),
    )


def lease_over(cutoff: datetime, now: datetime) -> tuple[ColumnElement[bool] | TextClause, ...]:
    """``processing`` rows older than ``cutoff`` whose lease is over at ``now`` (none: over): the
    sweeper's candidates for ``ABANDON`` (whether a transaction holds them is the adapter's)."""
    expired = or_(Event.claimed_until.is_(None), Event.claimed_until < now)
    return Event.status.in_(ABANDON.sources), Event.status_at < cutoff, expired, unfinished()


_FAIL = (
    update(Event)
    .where(*under_claim(FAIL))
    .values(
        status=bindparam("b_status"),
        status_at=bindparam("b_status_at"),
        last_error=bindparam("b_error"),
        last_traceback=bindparam("b_trace"),
    )
    .returning(Event.attempts)
)
_DISMISS = (
    update(Event)
    .where(*under_claim(MARK))
    .values(
        status=bindparam("b_status"),
        status_at=bindparam("b_status_at"),
        processed_at=bindparam("b_status_at"),
        last_error=bindparam("b_error"),
        last_traceback=None,
    )
    .returning(Event.attempts)
)


class SqlStore:
    def __init__(self, engine: Engine, **parts: Any) -> None:
        self.engine = engine
        # The runtime's sessionmakers when given (its handlers' sessions are the same kind).
        self.sessions: sessionmaker[Session] = parts.get("sessions") or make_sessionmaker(engine)
        # SQLite transactions that wait for no writer until they write (PostgreSQL: the same).
        self.deferred_sessions: sessionmaker[Session] = parts.get("deferred_sessions") or make_sessionmaker(
            deferred(engine)
        )
        self.reads = self.deferred_sessions  # the sweeper's and the replay check's reads

    # ===== the worker's shared part (claim / process / fail helpers) ==========================
    def fail(
        self, endpoint: str, event_id: str, attempt: int, last_try: bool, error: str, trace: str, started_at: datetime
    ) -> bool:
        """``FAIL`` under the token ``attempt`` (``failed`` after the last try), then the attempt's
        row (best effort, ``attempts.record``); False, and nothing written, when superseded."""
        moved = values(FAIL, Status.FAILED if last_try else Status.QUEUED, datetime.now(UTC))
        params = {
            "b_endpoint": endpoint,
            "b_event_id": event_id,
            "b_attempt": attempt,
            "b_error": error,
            "b_trace": trace,
            **bound(moved),
        }
        with self.sessions.begin() as session:
            marked = session.execute(_FAIL, params).first() is not None
        if marked:
            attempts.record(self.sessions, endpoint, event_id, attempt, started_at, "error", error, trace)
        return marked

    def dismiss(self, endpoint: str, event_id: str, attempt: int, reason: Reason, started_at: datetime) -> bool:
        """``MARK`` ``ignored`` under the token ``attempt`` with ``reason`` as its last error, its
        attempt's row (``ignored``, no handler ran) and the rejection counted under ``reason``, in
        one transaction; False, and nothing written, when superseded."""
        now = datetime.now(UTC)
        moved = values(MARK, Status.IGNORED, now)
        params = {"b_endpoint": endpoint, "b_event_id": event_id, "b_attempt": attempt, "b_error": reason}
        with self.sessions.begin() as session:
            if session.execute(_DISMISS, {**params, **bound(moved)}).first() is None:
                return False
            attempts.add(session, endpoint, event_id, attempt, started_at, Status.IGNORED, [], error=reason)
            count_rejection(session, endpoint, reason, now)
        return True

    def renew(self, endpoint: str, event_id: str, attempt: int, until: datetime) -> bool:
        """``RENEW``: the lease of the claim whose token is ``attempt`` extended to ``until``;
        False when the claim is no longer held (superseded, or the row moved on) or, on
        PostgreSQL, while a transaction holds the row (its lock keeps the sweeper away)."""
        held = select(Event.endpoint, Event.event_id).where(*under_claim(RENEW)).with_for_update(skip_locked=True)
        params = {"b_endpoint": endpoint, "b_event_id": event_id, "b_attempt": attempt}
        statement = (
            update(Event)
            .where(tuple_(Event.endpoint, Event.event_id).in_(held))
            .values(values(RENEW, Status.PROCESSING, datetime.now(UTC), until))
            .returning(Event.attempts)
        )
        with self.sessions.begin() as session:
            return session.execute(statement, params).first() is not None

    def stale(self, endpoint: str, event_id: str, attempt: int, started_at: datetime, error: str | None) -> None:
        """The attempt's row of a claim found stale when it finished (``STALE``; its own error,
        if any, after it), unless the sweeper recorded it when it abandoned the row: the event's row
        itself is the newer claim's (best effort, as ``fail``'s)."""
        note = STALE if error is None else f"{STALE}; its own error: {error}"
        mine = (Attempt.endpoint == endpoint, Attempt.event_id == event_id, Attempt.number == attempt)
        try:
            with self.reads() as session:
                recorded = session.scalar(select(Attempt.id).where(*mine).limit(1)) is not None
        except SQLAlchemyError:
            recorded = False  # then the record below fails too, and says so
        if not recorded:  # the sweeper records the attempt it abandoned
            attempts.record(self.sessions, endpoint, event_id, attempt, started_at, "error", note[:2000])

    def time_out(self, claim: Any, error: str, trace: str) -> bool:
        """The attempt of a job stuck past its timeout, failed under its token: the thread's own
        failure path must then record nothing (``claim.abandoned``, set first)."""
        claim.abandoned = True
        return self.fail(claim.endpoint, claim.event_id, claim.attempt, claim.last_try, error, trace, claim.started_at)

    def keep(self) -> contextlib.AbstractContextManager[None]:
        """No connection is kept (SQLite's pool is cheap); PostgreSQL overrides it."""
        return contextlib.nullcontext()

    # ===== the receiver, the sweeper, replay =================================================
    def inserts(self) -> Inserts:
        """A writer for one group commit: SQLAlchemy's ``INSERT … RETURNING`` on a kept connection."""
        return SqlInserts(self.engine)

    def replayed(self, endpoint: str, replay_key: str, event_ids: set[str], now: datetime) -> bool:
        """Whether another event id holds ``replay_key`` (stored, or purged: its tombstone); if so
        counted under ``replayed_signature`` (the check reads; only a replay writes)."""
        with self.reads() as session:
            holder = session.scalar(
                select(Event.event_id).where(Event.endpoint == endpoint, Event.replay_key == replay_key)
            )
            if holder is None:  # purged: its tombstone still holds the key
                holder = session.scalar(
                    select(Tombstone.event_id).where(Tombstone.endpoint == endpoint, Tombstone.replay_key == replay_key)
                )
        if holder is None or holder in event_ids:
            return False
        with self.sessions.begin() as session:
            count_rejection(session, endpoint, Reason.REPLAYED_SIGNATURE, now)
        return True

    def leave_for_sweeper(self, keys: Sequence[Key], now: datetime) -> None:
        """``queued`` → ``received``; best effort (a row left ``queued`` is found by the sweeper too)."""
        try:
            with self.sessions.begin() as session:
                for start in range(0, len(keys), CHUNK):
                    session.execute(
                        update(Event)
                        .where(
                            tuple_(Event.endpoint, Event.event_id).in_(keys[start : start + CHUNK]),
                            Event.status.in_(LEAVE.sources),
                        )
                        .values(values(LEAVE, Status.RECEIVED, now))
                    )
        except SQLAlchemyError:
            log.warning("could not mark events received; the sweeper finds them queued", exc_info=True)

    def replay(
        self, keys: Sequence[Key], audit: dict[str, Any], now: datetime, *, every: bool = False
    ) -> tuple[list[Key], int | None]:
        """``REPLAY`` the keys not ``processing`` and write the audit record, in one transaction."""
        try:
            with self.sessions.begin() as session:
                return self._replay(session, keys, audit, now, every)
        except _Refused:  # rolled back: nothing marked, no record
            return [], None

    def _replay(
        self, session: Session, keys: Sequence[Key], audit: dict[str, Any], now: datetime, every: bool
    ) -> tuple[list[Key], int | None]:
        marked: list[Key] = []
        for start in range(0, len(keys), CHUNK):
            marked += [
                (p, e)
                for p, e in session.execute(
                    update(Event)
                    .where(
                        tuple_(Event.endpoint, Event.event_id).in_(keys[start : start + CHUNK]),
                        Event.status.in_(REPLAY.sources),
                    )
                    .values(values(REPLAY, Status.QUEUED, now))
                    .returning(Event.endpoint, Event.event_id)
                )
            ]
        if every and len(set(marked)) < len(set(keys)):
            raise _Refused
        order = {pair: n for n, pair in enumerate(keys)}
        marked.sort(key=order.__getitem__)
        return marked, audit_record(session, audit, marked, now)

    def status(self, key: Key) -> str | None:
        with self.reads() as session:
            return session.scalar(select(Event.status).where(Event.endpoint == key[0], Event.event_id == key[1]))

    def interrupt(self, endpoint: str, event_id: str, attempt: int, started_at: datetime) -> bool:
        now = datetime.now(UTC)
        change = values(INTERRUPT, Status.QUEUED, now) | {"attempts": Event.attempts - 1}
        key = {"b_endpoint": endpoint, "b_event_id": event_id, "b_attempt": attempt}
        with self.sessions.begin() as session:
            found: Any = session.execute(update(Event).where(*under_claim(INTERRUPT)).values(change), key)
            if not found.rowcount:
                return False
            why = "the worker stopped before this attempt ended (WEBHOOKS_STOP_TIMEOUT): not counted"
            attempts.add(session, endpoint, event_id, attempt, started_at, INTERRUPTED, [], why)
        return True

    def release_claims(self) -> int:
        from webhooks.tables.forwarding import Delivery

        with self.sessions.begin() as session:
            found: Any = session.execute(
                update(Event).where(Event.status == Status.PROCESSING).values(claimed_until=None)
            )
            session.execute(
                update(Delivery)
                .where(Delivery.status == DeliveryStatus.PENDING, Delivery.leased_until.is_not(None))
                .values(leased_until=None)
            )
        return int(found.rowcount or 0)

    def abandoned(self, cutoff: datetime, limit: int, max_attempts: int, now: datetime) -> list[Key]:
        """``processing`` rows whose lease is over at ``now`` (``claimed_until``; none: over) and
        that no transaction holds (PostgreSQL: ``FOR UPDATE SKIP LOCKED`` skips a live job's
        locked row; ``SqliteStore`` holds the processing lock around this)."""
        query = (
            select(Event.endpoint, Event.event_id, Event.attempts, Event.status_at)
            .where(*lease_over(cutoff, now))
            .order_by(Event.status_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        requeue: list[Key] = []
        with self.sessions.begin() as session:
            for endpoint, event_id, tried, claimed_at in session.execute(query).all():
                exhausted = tried >= max_attempts
                change = values(ABANDON, Status.FAILED if exhausted else Status.QUEUED, now)
                if exhausted:
                    change["last_error"] = ABANDONED
                else:
                    requeue.append((endpoint, event_id))
                session.execute(
                    update(Event).where(Event.endpoint == endpoint, Event.event_id == event_id).values(change)
                )
                if tried > 0:  # the abandoned attempt's row (a late finish of it adds none: ``stale``)
                    session.add(
                        Attempt(
                            endpoint=endpoint,
                            event_id=event_id,
                            number=tried,
                            started_at=claimed_at,
                            finished_at=now,
                            status="error",
                            error=ABANDONED,
                        )
                    )
                log.warning(
                    "sweeper: %s/%s abandoned by its worker, %s",
                    endpoint,
                    event_id,
                    Status.FAILED if exhausted else "requeued",
                )
        return requeue

    def stranded(self, cutoff: datetime, limit: int) -> Iterator[list[tuple[Key, str]]]:
        """``received`` / ``queued`` rows older than ``cutoff``: keyset pages of ``SWEEP_PAGE``."""
        base = (
            select(Event.status_at, Event.endpoint, Event.event_id, Event.status)
            .where(Event.status.in_(REQUEUE.sources), Event.status_at < cutoff, unfinished())
            .order_by(Event.status_at, Event.endpoint, Event.event_id)
            .limit(SWEEP_PAGE)
        )
        after: tuple[datetime, str, str] | None = None
        seen = 0
        while seen < limit:
            key = tuple_(Event.status_at, Event.endpoint, Event.event_id)
            query = base if after is None else base.where(key > after)
            with self.reads() as session:
                rows = session.execute(query).all()
            if not rows:
                return
            seen += len(rows)
            after = (rows[-1][0], rows[-1][1], rows[-1][2])
            yield [((p, e), s) for _, p, e, s in rows]

    def requeued(self, key: Key, status: str, now: datetime) -> None:
        """``REQUEUE`` the row if it is still in ``status`` (one of ``REQUEUE.sources``)."""
        if status not in REQUEUE.sources:
            raise ValueError(f"requeue cannot take an event from {status}")
        with self.sessions.begin() as session:
            session.execute(
                update(Event)
                .where(Event.endpoint == key[0], Event.event_id == key[1], Event.status == status)
                .values(values(REQUEUE, Status.QUEUED, now))
            )
