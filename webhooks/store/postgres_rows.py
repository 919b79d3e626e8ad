r"""The group commit's PostgreSQL writer (psycopg): a batch's rows as ``$n``-placeholder
``INSERT``\s on one kept psycopg connection in autocommit, their SQL written from the table
definitions (``PostgresStore.inserts``)."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import JSON, Engine, Table
from sqlalchemy.exc import DBAPIError

from webhooks.store.base import CHUNK_ROWS, Bodies, Key, Rows
from webhooks.store.sql_rows import stored
from webhooks.tables.events import Body, Event

log = logging.getLogger(__name__)
MAX_CACHED = 64  # statement texts kept per row count up to this (a batch's usual sizes)
PREPARE_AFTER = 5  # executions of a batch's text before psycopg prepares it (its default; the pool's is off)


class PostgresInserts:
    """PostgreSQL (psycopg): a batch's rows in ``INSERT … VALUES (…), (…) ON CONFLICT DO NOTHING
    RETURNING`` the key of each row stored, on a connection in autocommit: one round trip, one
    commit. Its text, written with PostgreSQL's own ``$n`` placeholders (psycopg's ``RawCursor``),
    is sent as it is and prepared by the server: SQLAlchemy's named placeholders made a long text
    that psycopg parsed again on every execution (it caches only short statements of at most 50
    parameters), a fifth of a duplicate's CPU.

    A statement takes at most 65 535 parameters: a big batch (a SendGrid delivery of thousands of
    events) is written ``CHUNK_ROWS`` rows a statement, all in one transaction with the bodies of
    the deliveries that stored something, so a delivery is stored whole or not at all.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._raw: Any = None
        self._texts: dict[tuple[tuple[str, ...], int], str] = {}
        self._json: dict[tuple[str, ...], tuple[bool, ...]] = {}

    def _text(self, names: tuple[str, ...], count: int) -> str:
        """The statement for ``count`` rows with these keys (kept for the sizes that recur)."""
        found = self._texts.get((names, count))
        if found is None:
            found = _insert_text(Event.__table__, names, count, returning=True)  # type: ignore[arg-type]
            if count <= MAX_CACHED or count == CHUNK_ROWS:
                self._texts[names, count] = found
            self._json[names] = _json_columns(Event.__table__, names)  # type: ignore[arg-type]
        return found

    def insert(self, rows: Rows, bodies: Bodies) -> set[Key]:
        """Store ``rows`` (status ``STORE``), then the ``bodies(created)`` rows, in one transaction;
        the keys stored."""
        import psycopg

        stored(rows)
        names = tuple(rows[0])
        chunks = [rows[i : i + CHUNK_ROWS] for i in range(0, len(rows), CHUNK_ROWS)]
        texts = [self._text(names, len(chunk)) for chunk in chunks]
        try:
            if self._raw is None:
                raw = self.engine.raw_connection()  # checked out (and pinged) once, kept
                raw.driver_connection.autocommit = True  # type: ignore[union-attr]
                raw.driver_connection.prepare_threshold = PREPARE_AFTER  # type: ignore[union-attr]
                self._raw = raw
            conn = self._raw.driver_connection
            with psycopg.RawCursor(conn) as cursor:
                if len(chunks) == 1 and not any(row["body_digest"] for row in rows):
                    return set(cursor.execute(texts[0], _params(chunks[0], names, self._json[names])).fetchall())
                with conn.transaction():
                    created: set[Key] = set()
                    for chunk, text in zip(chunks, texts, strict=True):
                        created.update(cursor.execute(text, _params(chunk, names, self._json[names])).fetchall())
                    kept = bodies(created)
                    if kept:
                        body_names = tuple(kept[0])
                        table: Table = Body.__table__  # type: ignore[assignment]
                        cursor.executemany(
                            _insert_text(table, body_names, 1, returning=False),
                            [_params([b], body_names, _json_columns(table, body_names)) for b in kept],
                        )
                    return created
        except psycopg.Error as exc:  # answered like any database error (503, batch stored alone)
            raise DBAPIError.instance("INSERT INTO events", None, exc, psycopg.Error) from exc

    def drop(self) -> None:
        """Discard the connection (after a failure): the next batch checks out a new one."""
        raw, self._raw = self._raw, None
        if raw is not None:
            try:
                raw.invalidate()
            except Exception:  # a broken connection may fail to close: it is discarded either way
                log.debug("discarding the batch connection failed", exc_info=True)


def _insert_text(table: Table, names: tuple[str, ...], count: int, *, returning: bool) -> str:
    """``INSERT INTO table (names) VALUES ($1, …), … ON CONFLICT DO NOTHING`` for ``count`` rows."""
    width = len(names)
    values = ", ".join(f"({', '.join(f'${r * width + c + 1}' for c in range(width))})" for r in range(count))
    keys = ", ".join(c.name for c in table.primary_key.columns)
    return (
        f"INSERT INTO {table.name} ({', '.join(table.c[n].name for n in names)}) VALUES {values}"
        f" ON CONFLICT DO NOTHING" + (f" RETURNING {keys}" if returning else "")
    )


def _json_columns(table: Table, names: tuple[str, ...]) -> tuple[bool, ...]:
    return tuple(isinstance(table.c[n].type, JSON) for n in names)


def _params(rows: list[dict[str, Any]], names: tuple[str, ...], json: tuple[bool, ...]) -> list[Any]:
    from psycopg.types.json import Jsonb

    return [
        Jsonb(v) if j and v is not None else v
        for row in rows
        for v, j in zip((row[n] for n in names), json, strict=True)
    ]
