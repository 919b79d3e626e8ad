"""The PostgreSQL adapter: the hand-built fast paths (psycopg, prepared statements several a
message) kept inside it.

The worker's path (``postgres_worker`` over ``pgwire``) takes three round trips an event where
SQLAlchemy's ORM took about thirteen (``benchmarks/workers.py``: the worker's events/s is what it
buys). It rests on two behaviours outside any public contract, each pinned by a test in
``tests/store/test_conformance.py``:

- psycopg sends ``DEALLOCATE ALL`` on a ROLLBACK once it has prepared statements of its own, and
  a pool reset or ``DISCARD ALL`` drops the statements prepared here: pooled connections have
  psycopg's auto-prepare off (``webhooks.engines``), and a statement found missing is prepared again
  and its message re-sent (``pgwire.Wire.send``) — pinned: a ROLLBACK, ``DEALLOCATE ALL`` and
  ``DISCARD ALL`` on the kept connection, then an event still processes.
- the handlers' ORM Session is bound to the connection inside the transaction that a raw
  ``BEGIN`` of the lock message opened (the connection is in autocommit, so SQLAlchemy sees no
  transaction of its own): the Session's flush joins it, and the mark's ``COMMIT`` (or the
  rollback of a failure or a superseded claim) ends both — pinned: a handler's write commits
  with the mark and rolls back with an error and with a superseded claim.
"""

from __future__ import annotations

import contextlib
from datetime import datetime

from webhooks.store import pgwire, postgres_worker
from webhooks.store.base import Claimed, Inserts, Work
from webhooks.store.postgres_rows import PostgresInserts
from webhooks.store.sql import SqlStore


class PostgresStore(SqlStore):
    # ===== the worker: claim, lock + apply the version, mark (postgres_worker, pgwire) ========
    def claim(self, endpoint: str, event_id: str, now: datetime, until: datetime) -> Claimed | None:
        """``CLAIM`` leased ``until``, committed without waiting for the disk (``postgres_worker.claim``)."""
        with pgwire.wire(self.engine) as wire:
            return postgres_worker.claim(wire, endpoint, event_id, now, until)

    def process(self, claimed: Claimed, work: Work, started_at: datetime) -> str:
        """Lock, apply and mark in one or two messages (``postgres_worker.process``); whatever
        happened, no transaction stays open (nor its row lock, which a failure's record waits for)."""
        with pgwire.wire(self.engine) as wire:
            return postgres_worker.process(self.sessions, wire, claimed, work, started_at)

    def time_out(self, claim: object, error: str, trace: str) -> bool:
        """Nothing recorded: the stuck transaction holds the row, so the thread settles it when
        its call returns (the sweeper, if it never does)."""
        return False

    def keep(self) -> contextlib.AbstractContextManager[None]:
        """This thread's events share one connection inside (``pgwire.keep``)."""
        return pgwire.keep(self.engine)

    # ===== the receiver: the group commit's insert (postgres_rows.PostgresInserts) ===========
    # The sweeper's ``abandoned`` is ``SqlStore``'s: ``FOR UPDATE SKIP LOCKED`` skips the rows
    # that a live job's transaction holds locked.
    def inserts(self) -> Inserts:
        """psycopg: one ``$n``-placeholder statement a batch, in autocommit (one round trip)."""
        if self.engine.dialect.driver != "psycopg":
            return super().inserts()
        return PostgresInserts(self.engine)
