"""The store's interface: the operations of an event's life (see ``webhooks.store``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any, Protocol

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
    def replay(self, keys: Sequence[Key], audit: dict[str, Any], now: datetime, *,
               every: bool = False) -> tuple[list[Key], int | None]:
        """``REPLAY`` each key not ``processing`` and add the audit record (``replays``: ``audit``
        plus the keys marked) in one transaction; the keys marked, in order, and the record's id.
        ``every``: all or nothing (a key missing or ``processing`` leaves all unchanged: ``[], None``)."""
        ...

    def status(self, key: Key) -> str | None:
        """The event's status now (None: no such event)."""
        ...

    # --- the sweeper -------------------------------------------------------------------------
    def abandoned(self, cutoff: datetime, limit: int, max_attempts: int, now: datetime) -> list[Key]:
        """``ABANDON`` ``processing`` rows older than ``cutoff`` that no live job holds; the keys
        to enqueue again (those with attempts left; the rest are ``failed``)."""
        ...

    def stranded(self, cutoff: datetime, limit: int) -> Iterator[list[tuple[Key, str]]]:
        """``received`` / ``queued`` rows older than ``cutoff``, a keyset page at a time, with
        their status: the sweeper checks which have no live job."""
        ...

    def requeued(self, key: Key, status: str, now: datetime) -> None:
        """``REQUEUE`` one stranded row (if still in ``status``): its job was enqueued again."""
        ...

    # --- the worker (claim, process under the claim's token, fail) ------------------------------
    def claim(self, endpoint: str, event_id: str) -> Any:
        """``CLAIM``: the claimed row (its ``attempts`` is the token), or None: nothing to do."""
        ...

    def fail(self, endpoint: str, event_id: str, attempt: int, last_try: bool, error: str, trace: str) -> bool:
        """``FAIL`` under the token ``attempt``, with the error; False when the claim was superseded."""
        ...
