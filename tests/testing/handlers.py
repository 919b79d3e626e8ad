"""Handlers of the plugin's own tests (tests/testing): they write through ``event.session`` and
one of them fails on purpose."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from webhooks import on
from webhooks.providers import PROVIDERS

metadata = sa.MetaData()
effects = sa.Table(
    "testing_effects",
    metadata,
    sa.Column("event_id", sa.String(255), primary_key=True),
    sa.Column("endpoint", sa.String(100)),
    sa.Column("key", sa.String(64)),
)


def record(event: Any, state: Any, idempotency_key: str) -> None:
    if event.type == "invoice.payment_failed":
        raise RuntimeError(f"cannot handle {event.event_id}")
    event.session.execute(
        effects.insert().values(event_id=event.event_id, endpoint=event.endpoint, key=idempotency_key)
    )


for _kind in PROVIDERS:  # ``@on``'s first argument names an endpoint or a kind: each kind's every type
    on(_kind, "*")(record)
