"""The group commit's SQLAlchemy writer (SQLite, and PostgreSQL on a driver other than psycopg):
a batch's rows in ``INSERT … ON CONFLICT DO NOTHING RETURNING`` on one kept connection."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

from webhooks.engines import upsert
from webhooks.store.base import CHUNK_ROWS, Bodies, Key, Rows
from webhooks.store.transitions import STORE, values
from webhooks.tables.events import Body, Event
from webhooks.vocabulary import Status

log = logging.getLogger(__name__)


def stored(rows: Rows) -> Rows:
    """``rows`` with the status a new event is stored in (``STORE``), as of its ``received_at``."""
    for row in rows:
        row.update(values(STORE, Status.QUEUED, row["received_at"]))
    return rows


class SqlInserts:
    """One group commit's writer: keeps one connection for its batches (one batch at a time)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._conn: Connection | None = None
        self._insert: Any = None

    def insert(self, rows: Rows, bodies: Bodies) -> set[Key]:
        """Store ``rows`` (status ``STORE``), then the ``bodies(created)`` rows, in one transaction;
        the keys stored."""
        stored(rows)
        if self._conn is None:
            self._conn = self.engine.connect()
            self._insert = upsert(self._conn, Event).on_conflict_do_nothing().returning(Event.endpoint, Event.event_id)
        conn = self._conn
        with conn.begin():
            created: set[Key] = set()
            for start in range(0, len(rows), CHUNK_ROWS):  # SQLAlchemy's executemany holds a whole call's rows
                created.update((p, e) for p, e in conn.execute(self._insert, rows[start : start + CHUNK_ROWS]))
            kept = bodies(created)
            if kept:
                conn.execute(upsert(conn, Body).on_conflict_do_nothing(), kept)
        return created

    def drop(self) -> None:
        """Discard the batches' connection after a failure: the next batch connects afresh."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.invalidate()  # whatever broke it (or not), it never goes back to the pool
                conn.close()
            except SQLAlchemyError:
                log.debug("discarding the batch connection failed", exc_info=True)
