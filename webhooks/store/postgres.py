"""The PostgreSQL adapter: the hand-built fast paths (psycopg, prepared statements several a
message) kept inside it."""

from __future__ import annotations

from webhooks.store.base import Inserts
from webhooks.store.postgres_rows import PostgresInserts
from webhooks.store.sql import SqlStore


class PostgresStore(SqlStore):
    # ===== the worker: claim, lock + apply the version, mark (jobs/postgres.py, pgwire) ========

    # ===== the receiver: the group commit's insert (postgres_rows.PostgresInserts) ===========
    # The sweeper's ``abandoned`` is ``SqlStore``'s: ``FOR UPDATE SKIP LOCKED`` skips the rows
    # that a live job's transaction holds locked.
    def inserts(self) -> Inserts:
        """psycopg: one ``$n``-placeholder statement a batch, in autocommit (one round trip)."""
        if self.engine.dialect.driver != "psycopg":
            return super().inserts()
        return PostgresInserts(self.engine)
