"""PayPal's REST API: the copy of a delivered event that PayPal itself holds (worker side: I/O).

``paypal.py`` stays sans-I/O and loads this module only inside its ``refetch``. With
``client_id`` and ``client_secret`` set, the event is fetched by id (OAuth client credentials,
``api_base`` default https://api-m.paypal.com) and only PayPal's copy is acted on. A copy that
differs from the delivered body in what is acted on (``id``, ``event_type``, ``resource_type``,
``resource``), or no copy at all, is ``MismatchError``: the event fails at once with that reason
and no handler runs (PayPal signs the body only through its CRC-32). ``FetchError`` (network, 5xx,
429, expired token) is retried by RQ with backoff. HTTP goes through ``webhooks.outbound``; each
call waits at most the endpoint's ``outbound_timeout``; calls share the endpoint's budget
(``API_RATE`` a second per process, by waiting).
Docs: https://developer.paypal.com/docs/api/webhooks/v1/#webhooks-events_get
"""

from __future__ import annotations

import base64
import json
import time
import urllib.parse
from typing import Any

from webhooks import outbound
from webhooks.providers import api
from webhooks.providers.api import FetchError, MismatchError
from webhooks.providers.base import Endpoint

PAYPAL_API = "https://api-m.paypal.com"
API_RATE = 20.0  # requests a second per endpoint and process
COMPARED = ("id", "event_type", "resource_type", "resource")
# (endpoint, client id, API base) → (token, expiry): a token of one API (sandbox, live) is never sent to another
_tokens: dict[tuple[str, str, str], tuple[str, float]] = {}


def event(endpoint: Endpoint, delivered: Any) -> Any:
    """PayPal's copy of the delivered event, checked against it."""
    event_id = delivered.get("id") if isinstance(delivered, dict) else None
    if not isinstance(event_id, str) or not event_id:
        raise MismatchError("the delivered PayPal event has no id")
    base = str(endpoint.options.get("api_base") or PAYPAL_API).rstrip("/")
    url = f"{base}/v1/notifications/webhooks-events/{urllib.parse.quote(event_id, safe='')}"
    status, copy = _get(endpoint, base, url)
    if status == 404:
        raise MismatchError(f"PayPal has no event {event_id!r}: the delivered body is not PayPal's")
    differ = [k for k in COMPARED if not isinstance(copy, dict) or copy.get(k) != delivered.get(k)]
    if differ:
        raise MismatchError(f"PayPal's copy of {event_id!r} differs from the delivered body in {', '.join(differ)}")
    return copy


def _get(endpoint: Endpoint, base: str, url: str) -> tuple[int, Any]:
    api.throttle(endpoint, API_RATE)
    timeout = endpoint.outbound_timeout  # each call: WEBHOOKS_OUTBOUND_TIMEOUT_SECONDS
    token = _token(endpoint, base, timeout)
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


def _token(endpoint: Endpoint, base: str, timeout: float) -> str:
    """An OAuth access token (client credentials), cached until a minute before it expires."""
    key = _token_key(endpoint, base)
    cached = _tokens.get(key)
    if cached is not None and cached[1] > time.monotonic():
        return cached[0]
    basic = base64.b64encode(f"{key[1]}:{endpoint.options['client_secret']}".encode()).decode()
    try:
        answer = outbound.call(
            f"{base}/v1/oauth2/token",
            method="POST",
            data=b"grant_type=client_credentials",
            timeout=timeout,
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
