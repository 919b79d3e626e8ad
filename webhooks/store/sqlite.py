"""The SQLite adapter: the embedded default (SQLAlchemy throughout)."""

from __future__ import annotations

from webhooks.store.sql import SqlStore


class SqliteStore(SqlStore):
    # ===== the worker: claim, process (handlers outside the write lock), mark ==================

    # ===== the receiver: the group commit's insert ===========================================
    pass
