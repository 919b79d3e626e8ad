"""Handlers of the fault suite: every effect is counted in a table keyed by event, so a second
committed effect shows as ``n = 2``; ``test.slow`` events take a while (for kills and SIGTERMs)."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy.dialects.postgresql import insert

from tests.faults.effects import effects
from webhooks import HandlerEvent, on

SLOW_SECONDS = 3.0


@on("stripe", "*")
@on("adyen", "*")
def effect(event: HandlerEvent, state: Any) -> None:
    if event.type == "test.slow":
        time.sleep(SLOW_SECONDS)
    stmt = insert(effects).values(endpoint=event.endpoint, event_id=event.event_id, n=1)
    event.session.execute(
        stmt.on_conflict_do_update(index_elements=["endpoint", "event_id"], set_={"n": effects.c.n + 1})
    )
