"""Re-fetching an event's object, or the event itself, from the provider's API (worker side: I/O).

Called after the claim and before any database lock is taken (``jobs.process``): a slow API
never holds a row, an object or SQLite's write lock.

- Stripe, ``api_key`` set: a thin (v2) event's ``related_object.url`` is fetched; with
  ``refetch = true`` every event's object is fetched (type from ``data.object.object``) through
  the official SDK (``webhooks.providers.stripe_api``). The fetched state gets its own version,
  the fetch time in the unit of Stripe's event versions (0.1 ms), so a state fetched later always
  wins and an older snapshot never overwrites it. A 404 stores the object as deleted.
- PayPal, ``client_id`` and ``client_secret`` set: the event is fetched by id (OAuth client
  credentials, ``api_base`` default https://api-m.paypal.com) and only PayPal's copy is acted on.
  A copy that differs from the delivered body in what is acted on (``id``, ``event_type``,
  ``resource_type``, ``resource``), or no copy at all, is ``MismatchError``: the event fails at
  once with that reason and no handler runs (PayPal signs the body only through its CRC-32).

``FetchError`` (network, 5xx, 429, expired token) is retried by RQ with backoff.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import threading
import time
import urllib.parse
from typing import Any

from webhooks import outbound
from webhooks.providers.base import Endpoint, ObjectRef, Provider
from webhooks.providers.stripe_api import ApiError, retrieve, throttle

PAYPAL_API = "https://api-m.paypal.com"
COMPARED = ("id", "event_type", "resource_type", "resource")
# (endpoint, client id, API base) → (token, expiry): a token of one API (sandbox, live) is never sent to another
_tokens: dict[tuple[str, str, str], tuple[str, float]] = {}
_versions = {"last": 0}
_lock = threading.Lock()


class FetchError(Exception):
    """The provider's API did not give the object's state; RQ retries the job."""


class MismatchError(Exception):
    """The provider's own copy of the event is not what was delivered: never act on it, never retry."""


def fresh_version() -> int:
    """Now in 0.1 ms (the unit of Stripe's versions), strictly increasing within this process."""
    with _lock:
        _versions["last"] = max(_versions["last"] + 1, time.time_ns() // 100_000)
        return _versions["last"]


def current(provider: Provider, endpoint: Endpoint | None, event_type: str, data: Any,
            ref: ObjectRef | None) -> tuple[Any, ObjectRef | None]:
    """The event's data and object as the handlers must see them (see the module's doc)."""
    if endpoint is None:
        return data, ref
    return provider.refetch(endpoint, event_type, data, ref)  # the kind decides (Provider.refetch)


def stripe_object(endpoint: Endpoint, ref: ObjectRef, thin: bool) -> ObjectRef:
    """``ref`` with Stripe's current state of its object, versioned by the fetch time."""
    state = _stripe_state(endpoint, ref, thin)
    return dataclasses.replace(ref, state=state, version=max(ref.version, fresh_version()))


def _stripe_state(endpoint: Endpoint, ref: ObjectRef, thin: bool) -> Any:
    path = None
    if thin:
        path = ref.state["related_object"].get("url")
        if not isinstance(path, str) or not path.startswith("/"):
            raise FetchError("thin event without a related_object.url")
    try:
        return retrieve(endpoint, ref.type, ref.id, path)
    except ApiError as exc:
        raise FetchError(str(exc)) from None


def paypal_event(endpoint: Endpoint, delivered: Any) -> Any:
    """PayPal's copy of the delivered event, checked against it."""
    event_id = delivered.get("id") if isinstance(delivered, dict) else None
    if not isinstance(event_id, str) or not event_id:
        raise MismatchError("the delivered PayPal event has no id")
    base = str(endpoint.options.get("api_base") or PAYPAL_API).rstrip("/")
    url = f"{base}/v1/notifications/webhooks-events/{urllib.parse.quote(event_id, safe='')}"
    status, copy = _paypal_get(endpoint, base, url)
    if status == 404:
        raise MismatchError(f"PayPal has no event {event_id!r}: the delivered body is not PayPal's")
    differ = [k for k in COMPARED if not isinstance(copy, dict) or copy.get(k) != delivered.get(k)]
    if differ:
        raise MismatchError(f"PayPal's copy of {event_id!r} differs from the delivered body in {', '.join(differ)}")
    return copy


def _paypal_get(endpoint: Endpoint, base: str, url: str) -> tuple[int, Any]:
    throttle(endpoint)
    timeout = endpoint.outbound_timeout  # each call: WEBHOOKS_OUTBOUND_TIMEOUT_SECONDS
    token = _paypal_token(endpoint, base, timeout)
    try:
        answer = outbound.call(url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout)
    except outbound.Unreachable as exc:
        raise FetchError(f"PayPal {exc}") from None
    if answer.status == 404:
        return 404, None
    if answer.status == 401:  # revoked or expired early: the next attempt asks for a new token
        _tokens.pop(_token_key(endpoint, base), None)
    if answer.status >= 300:
        raise FetchError(f"PayPal {url} answered {answer.status}")
    try:
        return answer.status, json.loads(answer.body)
    except ValueError:
        raise FetchError(f"PayPal {url}: not JSON") from None


def _token_key(endpoint: Endpoint, base: str) -> tuple[str, str, str]:
    return endpoint.name, str(endpoint.options["client_id"]), base


def _paypal_token(endpoint: Endpoint, base: str, timeout: float) -> str:
    """An OAuth access token (client credentials), cached until a minute before it expires."""
    key = _token_key(endpoint, base)
    cached = _tokens.get(key)
    if cached is not None and cached[1] > time.monotonic():
        return cached[0]
    basic = base64.b64encode(f"{key[1]}:{endpoint.options['client_secret']}".encode()).decode()
    try:
        answer = outbound.call(
            f"{base}/v1/oauth2/token", method="POST", data=b"grant_type=client_credentials", timeout=timeout,
            headers={"Authorization": f"Basic {basic}", "Content-Type": "application/x-www-form-urlencoded"},
        )
    except outbound.Unreachable as exc:
        raise FetchError(f"PayPal OAuth: {exc}") from None
    if answer.status >= 300:
        raise FetchError(f"PayPal OAuth answered {answer.status}")
    try:
        granted = json.loads(answer.body)
        token, lifetime = str(granted["access_token"]), float(granted.get("expires_in", 300))
    except (ValueError, KeyError, TypeError) as exc:
        raise FetchError(f"PayPal OAuth: {exc.__class__.__name__}") from None
    _tokens[key] = (token, time.monotonic() + max(0.0, lifetime - 60))
    return token
