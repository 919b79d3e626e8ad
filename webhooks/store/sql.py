"""What both adapters do through SQLAlchemy: the operations with no hand-built fast path
(replay, the sweeper's queries, leaving rows for the sweeper, the replayed-signature check, a
failed attempt). ``SqliteStore`` and ``PostgresStore`` extend it with their own paths."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine


class SqlStore:
    def __init__(self, engine: Engine, **parts: Any) -> None:
        self.engine = engine

    # ===== the worker's shared part (claim / process / fail helpers) ==========================

    # ===== the receiver, the sweeper, replay =================================================
