"""What the providers' API clients (``stripe_api``, ``paypal_api``) share: their errors, the
per-endpoint call budget, and the version of a state fetched now.

These modules do I/O (worker side, or a command); the provider modules beside them stay sans-I/O
and load them only inside the capability that needs them (``Provider.refetch``, ``missed``).
Callers must not hold a database lock while they call.
"""

from __future__ import annotations

import threading
import time

from webhooks.providers.base import Endpoint
from webhooks.ratelimit import TokenBucket

_buckets: dict[str, TokenBucket] = {}
_versions = {"last": 0}
_lock = threading.Lock()


class ApiError(Exception):
    """The API gave no usable answer (network, 5xx, 429, auth): the caller retries later."""


class FetchError(Exception):
    """A re-fetch did not give the object's state (``Provider.refetch``); RQ retries the job."""


class MismatchError(Exception):
    """The provider's own copy of the event is not what was delivered: never act on it, never retry."""


def throttle(endpoint: Endpoint, rate: float) -> None:
    """Wait for this endpoint's next API call slot (``rate`` calls a second per process): an API's
    rate limit is kept by waiting, never by failing."""
    with _lock:
        bucket = _buckets.get(endpoint.name)
        if bucket is None or bucket.rate != rate:
            bucket = _buckets[endpoint.name] = TokenBucket(rate)
    while wait := bucket.take():
        time.sleep(wait)


def fresh_version() -> int:
    """Now in 0.1 ms (the unit of Stripe's versions), strictly increasing within this process: a
    state fetched later always outranks one fetched or delivered before."""
    with _lock:
        _versions["last"] = max(_versions["last"] + 1, time.time_ns() // 100_000)
        return _versions["last"]
