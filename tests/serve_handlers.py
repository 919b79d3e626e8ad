"""Handlers for ``webhooks serve`` process tests (named in ``WEBHOOKS_HANDLERS``): each run is
counted in ``serve_effects`` of the service's own SQLite database, in the event's transaction, so
an effect committed twice shows as ``n = 2``; ``test.slow`` events take a while (for kills)."""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa

from webhooks import HandlerEvent, on

SLOW_SECONDS = 0.2
CREATE = "CREATE TABLE IF NOT EXISTS serve_effects (event_id TEXT PRIMARY KEY, n INTEGER NOT NULL)"


@on("stripe", "*")
def effect(event: HandlerEvent, state: Any) -> None:
    if event.type == "test.slow":
        time.sleep(SLOW_SECONDS)
    event.session.execute(
        sa.text(
            "INSERT INTO serve_effects (event_id, n) VALUES (:e, 1)"
            " ON CONFLICT (event_id) DO UPDATE SET n = serve_effects.n + 1"
        ),
        {"e": event.event_id},
    )
