"""Handlers of the fault suite: every effect is counted in a table keyed by event, so a second
committed effect shows as ``n = 2``; ``test.slow`` events take a while (for kills and SIGTERMs)."""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert

from jobs import HandlerEvent, on

metadata = sa.MetaData()
effects = sa.Table(
    "fault_effects", metadata,
    sa.Column("provider", sa.String(100), primary_key=True),
    sa.Column("event_id", sa.String(255), primary_key=True),
    sa.Column("n", sa.Integer, nullable=False),
)
SLOW_SECONDS = 3.0


@on("stripe", "*")
@on("adyen", "*")
def effect(event: HandlerEvent, state: Any) -> None:
    if event.type == "test.slow":
        time.sleep(SLOW_SECONDS)
    stmt = insert(effects).values(provider=event.provider, event_id=event.event_id, n=1)
    event.session.execute(stmt.on_conflict_do_update(index_elements=["provider", "event_id"],
                                                     set_={"n": effects.c.n + 1}))
