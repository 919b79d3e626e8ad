"""The PostgreSQL adapter: the hand-built fast paths (psycopg, prepared statements several a
message) kept inside it."""

from __future__ import annotations

from webhooks.store.sql import SqlStore


class PostgresStore(SqlStore):
    # ===== the worker: claim, lock + apply the version, mark (jobs/postgres.py, pgwire) ========

    # ===== the receiver: the group commit's insert (batch_postgres.Rows) =====================
    pass
