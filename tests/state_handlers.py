"""Handlers for the current-state tests: they record what each call saw (named in ``WEBHOOKS_HANDLERS``)."""

from __future__ import annotations

import copy
import threading
from typing import Any

from webhooks import HandlerEvent, on

CALLS: list[dict[str, Any]] = []
FAIL_ONCE: set[str] = set()  # event ids whose first call raises
_lock = threading.Lock()


def reset() -> None:
    with _lock:
        CALLS.clear()
        FAIL_ONCE.clear()


@on("stripe", "*")
@on("adyen", "*")
@on("paypal", "*")
@on("mailgun", "*")
def record(event: HandlerEvent, state: Any, idempotency_key: str) -> None:
    with _lock:
        CALLS.append(
            {
                "endpoint": event.endpoint,
                "provider": event.provider,
                "kind": event.kind,
                "event_id": event.event_id,
                "type": event.type,
                "data": copy.deepcopy(event.data),
                "state": copy.deepcopy(state),
                "key": idempotency_key,
                "attempt": event.attempt,
                "version": event.version,
            }
        )
        if event.event_id in FAIL_ONCE:
            FAIL_ONCE.discard(event.event_id)
            raise RuntimeError("downstream timeout")
