"""The SQLite adapter: the embedded default (SQLAlchemy throughout)."""

from __future__ import annotations

from datetime import datetime

from webhooks.store import sqlite_worker
from webhooks.store.base import Claimed, Work
from webhooks.store.sql import SqlStore


class SqliteStore(SqlStore):
    # ===== the worker: claim, process (handlers outside the write lock), mark ==================
    def claim(self, endpoint: str, event_id: str, now: datetime) -> Claimed | None:
        """``CLAIM`` (``sqlite_worker.claim``), committed."""
        with self.sessions.begin() as session:
            return sqlite_worker.claim(session, endpoint, event_id, now)

    def process(self, claimed: Claimed, work: Work, started_at: datetime) -> str:
        """The handlers outside SQLite's write lock, the mark in a short write (``sqlite_worker``)."""
        return sqlite_worker.process(self.sessions, self.deferred_sessions, claimed, work, started_at)

    # ===== the receiver: the group commit's insert ===========================================
