"""Handlers used by the tests (named in ``WEBHOOKS_HANDLERS``).

``calls`` records every handler run (in the processing transaction, so a failed attempt leaves
no row); ``DOWNSTREAM`` plays an external API that dedups by idempotency key, as Stripe's does.
"""

from __future__ import annotations

import threading
from typing import Any

import sqlalchemy as sa

from webhooks import HandlerEvent, on

metadata = sa.MetaData()
calls = sa.Table(
    "test_handler_calls",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("endpoint", sa.String(100)),
    sa.Column("event_id", sa.String(255)),
    sa.Column("idempotency_key", sa.String(64)),
)

FAIL_TYPES: set[str] = set()
DOWNSTREAM_CALLS: list[str] = []  # every call made, with its key
DOWNSTREAM_EFFECTS: dict[str, str] = {}  # key → effect: what the downstream actually did
_lock = threading.Lock()


def create_tables(engine: sa.Engine) -> None:
    metadata.create_all(engine)


def reset() -> None:
    FAIL_TYPES.clear()
    DOWNSTREAM_CALLS.clear()
    DOWNSTREAM_EFFECTS.clear()


@on("stripe", "*")
@on("adyen", "*")
def record(event: HandlerEvent, state: Any, idempotency_key: str) -> None:
    event.session.execute(
        calls.insert().values(endpoint=event.endpoint, event_id=event.event_id, idempotency_key=idempotency_key)
    )


@on("stripe", "charge.refunded")
def refund(event: HandlerEvent, state: Any, idempotency_key: str) -> None:
    with _lock:  # the downstream API: the first call with a key takes effect, repeats do not
        DOWNSTREAM_CALLS.append(idempotency_key)
        DOWNSTREAM_EFFECTS.setdefault(idempotency_key, f"refund {event.data['data']['object']['id']}")
    if event.type in FAIL_TYPES:
        raise RuntimeError("downstream timeout while refunding")
