"""What the providers' API clients (``stripe_api``, ``paypal_api``, ``mollie_api``…) share: their
errors, the per-endpoint call budget, the version of a state fetched now, the pinned API base, one
bearer-token GET of a JSON resource, and the short memory of objects an API said it does not have.

These modules do I/O (worker side, or a command); the provider modules beside them stay sans-I/O
and load them only inside the capability that needs them (``Provider.refetch``, ``missed``).
Callers must not hold a database lock while they call.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from webhooks import outbound
from webhooks.buckets import TokenBucket
from webhooks.errors import ConfigError
from webhooks.providers.base import Endpoint

_buckets: dict[str, TokenBucket] = {}
_versions = {"last": 0}
_lock = threading.Lock()


class ApiError(Exception):
    """The API gave no usable answer (network, 5xx, 429, auth): the caller retries later."""


class FetchError(Exception):
    """A re-fetch did not give the object's state (``Provider.refetch``); RQ retries the job."""


class MismatchError(Exception):
    """The provider's own copy of the event is not what was delivered: never act on it, never retry."""


class UnknownObjectError(MismatchError):
    """A nudge of a kind that signs nothing named an object the provider does not have (its API
    answered 404, now or within ``Missing.ttl``): the event is ``ignored``, never retried or failed."""


class Missing:
    """Objects an API answered 404 for, remembered ``ttl`` seconds so that a flood naming one
    unknown id costs one call; per process, at most ``size`` entries (the oldest forgotten first)."""

    def __init__(self, ttl: float = 60.0, size: int = 10_000, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl, self.size, self.clock = ttl, size, clock
        self.until: OrderedDict[tuple[str, str], float] = OrderedDict()
        self.lock = threading.Lock()

    def __contains__(self, key: tuple[str, str]) -> bool:
        with self.lock:
            until = self.until.get(key)
            if until is not None and until <= self.clock():
                del self.until[key]
                until = None
            return until is not None

    def add(self, key: tuple[str, str]) -> None:
        with self.lock:
            self.until.pop(key, None)
            self.until[key] = self.clock() + self.ttl
            while len(self.until) > self.size:
                self.until.popitem(last=False)


MISSING = Missing()  # (endpoint name, URL) → when its 404 is forgotten


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


LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def check_base(name: str, base: Any, host: str | tuple[str, ...]) -> None:
    """``ConfigError`` unless ``base`` is ``https://<host>`` (one of the kind's documented hosts) or
    this machine (the tests' fake API): an API credential is never sent anywhere else."""
    hosts = (host,) if isinstance(host, str) else host
    parts = urllib.parse.urlsplit(str(base))
    try:
        port = parts.port
    except ValueError:
        port = -1
    official = parts.scheme == "https" and parts.hostname in hosts and port in (None, 443)
    local = parts.scheme in ("http", "https") and parts.hostname in LOCAL_HOSTS
    if not isinstance(base, str) or not (official or local) or parts.path.strip("/") or parts.query:
        named = " or ".join(f"https://{h}" for h in hosts)
        raise ConfigError(f"endpoint {name!r}: api_base must be {named} (or this machine, for tests)")


def is_local_base(base: Any) -> bool:
    """Whether ``base`` names this machine (allowed only from the file: the tests' fake APIs)."""
    return urllib.parse.urlsplit(str(base)).hostname in LOCAL_HOSTS


def bearer_json(
    endpoint: Endpoint,
    url: str,
    token: Any,
    *,
    who: str,
    accept: str,
    missing: str,
    rate: float,
    limit: int,
    unsigned: bool = False,
) -> Any:
    """``GET url`` with ``Authorization: Bearer <token>``, within the endpoint's budget (``rate`` a
    second) and ``outbound_timeout``, at most ``limit`` bytes, no redirects: the parsed JSON. A 404
    is ``MismatchError(missing)`` (fail at once); for a nudge nothing signed (``unsigned``) it is
    ``UnknownObjectError``, remembered in ``MISSING`` so the same URL is not asked again within its
    ttl. No answer, another status, an answer too long or not JSON is ``FetchError`` (retried).
    ``who`` names the provider in the messages."""
    if unsigned and (endpoint.name, url) in MISSING:
        raise UnknownObjectError(f"{missing} (answered 404 within the last {MISSING.ttl:.0f} s)")
    throttle(endpoint, rate)
    headers = {"Authorization": f"Bearer {token}", "Accept": accept}
    try:
        answer = outbound.call(url, headers=headers, timeout=endpoint.outbound_timeout, limit=limit, redirects=False)
    except outbound.Unreachable as exc:
        raise FetchError(f"{who} {exc}") from None
    if answer.status == 404:
        if unsigned:
            MISSING.add((endpoint.name, url))
            raise UnknownObjectError(missing)
        raise MismatchError(missing)
    if answer.status != 200 or len(answer.body) > limit:
        raise FetchError(f"{who} {url} answered {answer.status}")
    try:
        return json.loads(answer.body)
    except ValueError:
        raise FetchError(f"{who} {url}: not JSON") from None
