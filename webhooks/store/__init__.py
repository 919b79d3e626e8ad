"""The store: the one home of an event's life in the database.

``Store`` is the few operations an event's life needs; its status changes are the moves of
``webhooks.store.transitions`` (written once), and nothing outside this package writes
``events.status``. Two adapters implement it: ``webhooks.store.sqlite`` (SQLAlchemy; the embedded
default) and ``webhooks.store.postgres`` (psycopg messages of prepared statements, the hand-built
fast path, kept inside the adapter). ``open_store`` picks one for an engine. The receiver's group
commit, the worker's job, the sweeper, replay and reconcile call the store; one conformance module
(``tests/store/test_conformance.py``) proves each rule on both adapters.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from webhooks.store.base import Key, Store
from webhooks.store.postgres import PostgresStore
from webhooks.store.sqlite import SqliteStore

__all__ = ["Key", "PostgresStore", "SqliteStore", "Store", "open_store"]


def open_store(engine: Engine, **parts: Any) -> Store:
    """The adapter for ``engine``'s database."""
    if engine.dialect.name == "postgresql":
        return PostgresStore(engine, **parts)
    return SqliteStore(engine, **parts)
