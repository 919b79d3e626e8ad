"""Testing your handlers (docs/handlers.md, "Testing your handlers"): a pytest plugin
(``webhooks.testing.plugin``, on wherever the package is installed), a client that signs deliveries
as any of the 24 kinds would and runs the queued work through your handlers, the project's real
payloads by name, and test key material for the kinds that verify with a provider's keys.

Its names load on first use: pytest loads the plugin in every run, and a run that never asks for
its fixtures pays for nothing."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from webhooks.testing.catalogue import endpoints, payload, payload_names
    from webhooks.testing.harness import Outcome, WebhookClient

__all__ = ["Outcome", "WebhookClient", "endpoints", "payload", "payload_names"]
_HOMES = {"Outcome": "harness", "WebhookClient": "harness", "endpoints": "catalogue", "payload": "catalogue"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name, "catalogue" if name == "payload_names" else None)
    if home is None:
        raise AttributeError(f"module 'webhooks.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(f"webhooks.testing.{home}"), name)
