"""Handlers of the metrics test (``WEBHOOKS_HANDLERS=tests.metrics_handlers``): ``test.fail`` fails."""

from __future__ import annotations

from typing import Any

from webhooks import HandlerEvent, on


@on("stripe", "test.fail")
def fail(event: HandlerEvent, state: Any) -> None:
    raise RuntimeError("this handler always fails")
