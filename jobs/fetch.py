"""The re-fetch step of processing: the provider's declared ``refetch`` capability, asked after the
claim and before any database lock is taken (``jobs.process``), so a slow API never holds a row,
an object or SQLite's write lock.

Nothing here knows a provider: each kind's ``refetch`` (``webhooks.providers.base.Provider``) calls
its own API client beside it (``providers/stripe_api.py``, ``providers/paypal_api.py``).
``FetchError`` (network, 5xx, 429, expired token) is retried by RQ with backoff;
``MismatchError`` (the provider's copy is not what was delivered) fails the event at once;
``UnknownObjectError`` (a nudge of a kind that signs nothing named an object the provider does not
have) ends it ``ignored`` as ``unknown_object``: anyone can send one, so it must page no one.
"""

from __future__ import annotations

from typing import Any

from webhooks.providers.api import FetchError, MismatchError, UnknownObjectError
from webhooks.providers.base import Endpoint, ObjectRef, Provider

__all__ = ["FetchError", "MismatchError", "UnknownObjectError", "current"]


def current(
    provider: Provider, endpoint: Endpoint | None, event_type: str, data: Any, ref: ObjectRef | None
) -> tuple[Any, ObjectRef | None]:
    """The event's data and object as the handlers must see them: the provider's ``refetch`` for
    a configured endpoint, else as delivered (an endpoint since removed from the configuration)."""
    if endpoint is None:
        return data, ref
    return provider.refetch(endpoint, event_type, data, ref)
