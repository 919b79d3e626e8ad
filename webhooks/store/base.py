"""The store's interface: the operations of an event's life (see ``webhooks.store``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any, Protocol

Key = tuple[str, str]  # (endpoint, event_id): the events table's primary key
Rows = list[dict[str, Any]]


class Store(Protocol):
    # --- the receiver: store once, leave for the sweeper -------------------------------------
    def insert(self, rows: Rows, bodies: Callable[[set[Key]], Rows]) -> set[Key]:
        """Insert-or-ignore ``rows`` (``events``, status written here: ``STORE``) and then the
        ``bodies(created)`` rows, in one transaction; the keys this call stored. Raises
        ``SQLAlchemyError`` when nothing was committed."""
        ...

    def replayed(self, endpoint: str, replay_key: str, event_ids: set[str], now: datetime) -> bool:
        """For a delivery that stored nothing: whether ``replay_key`` is held by another event id
        (stored, or purged and tombstoned); if so the rejection is counted (``replayed_signature``)."""
        ...

    def leave_for_sweeper(self, keys: Sequence[Key]) -> None:
        """``LEAVE``: Redis refused these jobs; best effort (the sweeper finds ``queued`` too)."""
        ...

    # --- the operator: replay ----------------------------------------------------------------
    def replay(self, keys: Sequence[Key], audit: dict[str, Any]) -> tuple[list[Key], int]:
        """``REPLAY`` each key not ``processing`` and add the audit record (``replays``: ``audit``
        plus the keys marked) in one transaction; the keys marked, in order, and the record's id."""
        ...

    # --- the sweeper -------------------------------------------------------------------------
    def abandoned(self, cutoff: datetime, limit: int, max_attempts: int) -> list[Key]:
        """``ABANDON`` ``processing`` rows older than ``cutoff`` that no live job holds; the keys
        to enqueue again (those with attempts left; the rest are ``failed``)."""
        ...

    def stranded(self, cutoff: datetime, limit: int) -> Iterator[list[tuple[Key, str]]]:
        """``received`` / ``queued`` rows older than ``cutoff``, a keyset page at a time, with
        their status: the sweeper checks which have no live job."""
        ...

    def requeued(self, key: Key, status: str) -> None:
        """``REQUEUE`` one stranded row (if still in ``status``): its job was enqueued again."""
        ...

    # --- the worker (claim, process under the claim's token, fail) ------------------------------
    def claim(self, endpoint: str, event_id: str) -> Any:
        """``CLAIM``: the claimed row (its ``attempts`` is the token), or None: nothing to do."""
        ...

    def fail(self, endpoint: str, event_id: str, attempt: int, last_try: bool, error: str, trace: str) -> bool:
        """``FAIL`` under the token ``attempt``, with the error; False when the claim was superseded."""
        ...

