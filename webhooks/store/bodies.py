"""The ``bodies`` table's reads outside the store's adapters: whether a multi-event delivery's body
is kept already (a replayed capture of a batch stores nothing)."""

from __future__ import annotations

from sqlalchemy import Connection, select

from webhooks.tables.events import Body


def kept(conn: Connection, endpoint: str, digest: str) -> bool:
    found = conn.execute(select(Body.digest).where(Body.endpoint == endpoint, Body.digest == digest)).first()
    return found is not None
