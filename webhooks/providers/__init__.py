"""The explicit registry of provider kinds: kind name → provider instance."""

from __future__ import annotations

from webhooks.errors import ConfigError
from webhooks.providers.adyen import Adyen
from webhooks.providers.base import Endpoint, Provider
from webhooks.providers.stripe import Stripe

PROVIDERS: dict[str, Provider] = {p.kind: p for p in (Stripe(), Adyen())}


def get(kind: str) -> Provider:
    try:
        return PROVIDERS[kind]
    except KeyError:
        raise ConfigError(f"unknown provider kind {kind!r} (known: {', '.join(sorted(PROVIDERS))})") from None


__all__ = ["PROVIDERS", "Endpoint", "Provider", "get"]
