"""The store's interface: the operations of an event's life (see ``webhooks.store``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from sqlalchemy.orm import Session

from webhooks.providers.base import ObjectRef
from webhooks.vocabulary import Reason

Key = tuple[str, str]  # (endpoint, event_id): the events table's primary key
Rows = list[dict[str, Any]]
Bodies = Callable[[set[Key]], Rows]  # the ``bodies`` rows to store, given the events a batch created
CHUNK_ROWS = 1000  # rows a statement: 1 000 × 19 columns, well under PostgreSQL's 65 535 parameters


class Inserts(Protocol):
    """One group commit's writer of new events: one batch at a time, on a connection it keeps."""

    def insert(self, rows: Rows, bodies: Bodies) -> set[Key]:
        """Insert-or-ignore ``rows`` (``events``, status written here: ``STORE``) and then the
        ``bodies(created)`` rows, in one transaction; the keys this call stored. Raises
        ``SQLAlchemyError`` when nothing was committed (then call ``drop``)."""
        ...

    def drop(self) -> None:
        """Discard the kept connection (after a failure): the next batch connects afresh."""
        ...


# ===== the worker's values ====================================================================
class Claimed(NamedTuple):
    """The claimed event row: what processing reads of it (``attempts`` is the claim's token).
    The adapters read exactly these columns of ``events`` (``sql.CLAIMED``)."""

    endpoint: str
    event_id: str
    kind: str
    event_type: str
    attempts: int
    payload: bytes
    item_index: int | None
    body_digest: str | None
    object_type: str | None
    object_id: str | None
    object_version: int | None
    traceparent: str | None = None  # the receive span's: the job continues its trace


Prepared = tuple[Any, ObjectRef | None]  # the event's data, and the object it moves (if any)
Fold = Callable[[Any, ObjectRef], tuple[ObjectRef, str | None]]  # (stored state, offered) → merged, latest id


@dataclass(frozen=True)
class Seen:
    """What the handlers see, inside the transaction that marks the event (``session``)."""

    data: Any
    object_type: str | None
    object_id: str | None
    version: int | None
    is_latest: bool
    state: Any
    session: Session


@dataclass(frozen=True)
class Work:
    """What processing one claimed event runs, given by the job; the store orders it with its
    locks and its mark: ``prepare`` holding no lock (it may call the provider's API), ``fold``
    (a folding provider's merge, None: none) under the object's lock, ``run`` (the handlers
    named in ``handlers``; none: nothing runs between the lock and the mark) before the mark."""

    prepare: Callable[[], Prepared]
    fold: Fold | None
    handlers: list[str]
    run: Callable[[Seen], None]


class Store(Protocol):
    # --- the receiver: store once, leave for the sweeper -------------------------------------
    def inserts(self) -> Inserts:
        """A writer for one group commit (its batches share one kept connection)."""
        ...

    def replayed(self, endpoint: str, replay_key: str, event_ids: set[str], now: datetime) -> bool:
        """For a delivery that stored nothing: whether ``replay_key`` is held by another event id
        (stored, or purged and tombstoned); if so the rejection is counted (``replayed_signature``)."""
        ...

    def leave_for_sweeper(self, keys: Sequence[Key], now: datetime) -> None:
        """``LEAVE``: Redis refused these jobs; best effort (the sweeper finds ``queued`` too)."""
        ...

    # --- the operator: replay ----------------------------------------------------------------
    def replay(
        self, keys: Sequence[Key], audit: dict[str, Any], now: datetime, *, every: bool = False
    ) -> tuple[list[Key], int | None]:
        """``REPLAY`` each key not ``processing`` and add the audit record (``replays``: ``audit``
        plus the keys marked) in one transaction; the keys marked, in order, and the record's id.
        ``every``: all or nothing (a key missing or ``processing`` leaves all unchanged: ``[], None``)."""
        ...

    def status(self, key: Key) -> str | None:
        """The event's status now (None: no such event)."""
        ...

    # --- the sweeper -------------------------------------------------------------------------
    def abandoned(self, cutoff: datetime, limit: int, max_attempts: int, now: datetime) -> list[Key]:
        """``ABANDON`` ``processing`` rows older than ``cutoff`` whose lease is over at ``now`` and
        that no live job holds; the keys to enqueue again (those with attempts left; the rest are
        ``failed``)."""
        ...

    def interrupt(self, endpoint: str, event_id: str, attempt: int, started_at: datetime) -> bool:
        """``INTERRUPT`` the claim whose token is ``attempt`` (its worker stopping past its stop
        timeout): the event ``queued`` again with the attempt not counted, and an ``interrupted``
        attempt row; False when the claim is no longer held."""
        ...

    def release_claims(self) -> int:
        """End every lease (events' ``claimed_until``, deliveries' ``leased_until``): only for the
        one server of its database (``webhooks serve``) at its start, when no holder can be alive;
        the sweeper then takes the rows back at once. How many events were released."""
        ...

    def stranded(self, cutoff: datetime, limit: int) -> Iterator[list[tuple[Key, str]]]:
        """``received`` / ``queued`` rows older than ``cutoff``, a keyset page at a time, with
        their status: the sweeper checks which have no live job."""
        ...

    def requeued(self, key: Key, status: str, now: datetime) -> None:
        """``REQUEUE`` one stranded row (if still in ``status``): its job was enqueued again."""
        ...

    # --- the worker (claim, process under the claim's token, fail) ------------------------------
    def claim(self, endpoint: str, event_id: str, now: datetime, until: datetime) -> Claimed | None:
        """``CLAIM``, leased ``until`` (``claimed_until``): the claimed row (its ``attempts`` is the
        token), committed; None: nothing to do."""
        ...

    def renew(self, endpoint: str, event_id: str, attempt: int, until: datetime) -> bool:
        """``RENEW`` the lease of the claim whose token is ``attempt`` to ``until`` (the heartbeat
        of a long provider call, ``webhooks.worker.claims.heartbeat``); False: not renewed (the
        claim is no longer held, or a transaction holds the row, which keeps the sweeper away)."""
        ...

    def stale(self, endpoint: str, event_id: str, attempt: int, started_at: datetime, error: str | None) -> None:
        """Record the attempt's row of a claim that was stale when it finished (it marked and failed
        nothing); ``error``: its own, if it failed (best effort)."""
        ...

    def process(self, claimed: Claimed, work: Work, started_at: datetime) -> str:
        """Under the claim: lock the row and the object, apply the version when newer, run the
        handlers, ``MARK`` the row and add its attempt's row, in one transaction; the status, or
        ``skipped`` (the claim was superseded: nothing changed). Errors propagate, nothing kept."""
        ...

    def fail(
        self, endpoint: str, event_id: str, attempt: int, last_try: bool, error: str, trace: str, started_at: datetime
    ) -> bool:
        """``FAIL`` under the token ``attempt`` with the error, and its attempt's row (best effort);
        False when the claim was superseded (then nothing changed)."""
        ...

    def dismiss(self, endpoint: str, event_id: str, attempt: int, reason: Reason, started_at: datetime) -> bool:
        """``MARK`` ``ignored`` under the token ``attempt`` with ``reason`` as ``last_error`` (a nudge
        naming an object its provider does not have: ``unknown_object``), its attempt's row, and the
        rejection counted; False when the claim was superseded (then nothing changed)."""
        ...

    def time_out(self, claim: Any, error: str, trace: str) -> bool:
        """A job stuck past its timeout (``webhooks.worker.claims``): record its attempt as failed
        (its claim marked abandoned first), or nothing when the stuck transaction holds the row
        (PostgreSQL); whether it was recorded."""
        ...

    def keep(self) -> AbstractContextManager[None]:
        """Inside, this thread's events share one connection (a worker's loop); re-entrant."""
        ...
