"""Engines and sessions. SQLite gets WAL, a busy timeout and ``BEGIN IMMEDIATE`` transactions."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, sessionmaker


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(
            url, connect_args={"timeout": 30, "check_same_thread": False}, pool_size=5, max_overflow=20
        )
        _sqlite_setup(engine)
        return engine
    # pre-ping: a database restarted under us is noticed at check-out, not as a failed request.
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20, pool_timeout=10)


def _sqlite_setup(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control from pysqlite so BEGIN IMMEDIATE below is the only BEGIN.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        # Writers queue on the lock up front instead of failing at their first write.
        connection.exec_driver_sql("BEGIN IMMEDIATE")


REDACTED = frozenset({"authorization", "cookie", "proxy-authorization", "x-api-key"})


def redact(headers: dict[str, str]) -> dict[str, str]:
    """Request headers fit to store: credentials replaced, signatures kept (they prove nothing later)."""
    return {k: ("[redacted]" if k.lower() in REDACTED else v) for k, v in headers.items()}


def upsert(bind: Session | Connection, table: Any) -> Any:
    """``INSERT`` with ``ON CONFLICT`` support for the dialect in use (PostgreSQL or SQLite)."""
    engine = bind.get_bind() if isinstance(bind, Session) else bind
    insert = postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert
    return insert(table)


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)
