"""Stripe's API through the official ``stripe`` SDK: an object's current state, and the event log.

I/O lives here, not in ``stripe.py`` (which stays sans-I/O and loads this module only inside its
``refetch`` and ``missed`` capabilities). An endpoint's ``api_key`` (write it
``"env:STRIPE_API_KEY"``) authenticates; ``api_base`` (default https://api.stripe.com) points the
SDK at another server (the tests' fake). Each call waits at most the endpoint's
``outbound_timeout`` (``WEBHOOKS_OUTBOUND_TIMEOUT_SECONDS``) to connect and for each read, not the
SDK's 80 s: one slow API must not hold a worker for minutes. Calls are rate-limited per endpoint and process
(``API_RATE``, under Stripe's 25/s test-mode limit) by waiting, never by failing. Callers must
not hold a database lock while they call.
Docs: https://docs.stripe.com/api/events/list, https://docs.stripe.com/rate-limits
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import stripe

from webhooks.providers import api
from webhooks.providers.api import ApiError, FetchError
from webhooks.providers.base import Endpoint, ObjectRef

STRIPE_API = "https://api.stripe.com"
API_RATE = 20.0  # requests a second per endpoint and process
PAGE = 100  # Stripe's largest page


def client(endpoint: Endpoint) -> stripe.StripeClient:
    key = endpoint.options.get("api_key")
    if not key:
        raise ApiError(f"endpoint {endpoint.name!r} has no api_key")
    base = str(endpoint.options.get("api_base") or STRIPE_API).rstrip("/")
    # No SDK retries: RQ retries the attempt with backoff and records each error on the row.
    # requests' client, named: the SDK's urllib fallback has no timeout at all.
    http = stripe.RequestsClient(timeout=endpoint.outbound_timeout)
    return stripe.StripeClient(str(key), base_addresses={"api": base}, max_network_retries=0, http_client=http)


def throttle(endpoint: Endpoint) -> None:
    """Wait for this endpoint's next API call slot (``API_RATE`` a second)."""
    api.throttle(endpoint, API_RATE)


def _get(endpoint: Endpoint, path: str, **params: Any) -> Any:
    throttle(endpoint)
    try:
        response = client(endpoint).raw_request("get", path, **params)
        return json.loads(response.body)
    except stripe.StripeError as exc:
        if exc.http_status == 404:
            raise
        raise ApiError(f"{path} answered {exc.http_status or exc.__class__.__name__}") from None
    except ValueError:
        raise ApiError(f"{path} answered no JSON") from None


def resource_path(object_type: str, object_id: str) -> str | None:
    """``/v1/payment_intents/pi_…`` for a ``payment_intent``; None for a type the SDK does not know."""
    # The SDK's public constructor types a nested value by its ``object`` field (its own table of
    # resource classes); an unknown type stays a plain ``StripeObject``, which has no class URL.
    holder = stripe.StripeObject.construct_from({"found": {"object": object_type, "id": object_id}}, "")
    try:
        url: str = type(holder["found"]).class_url()
    except (AttributeError, NotImplementedError):  # nested resources have no class URL of their own
        return None
    return f"{url}/{quote(object_id, safe='')}"


def retrieve(endpoint: Endpoint, object_type: str, object_id: str, path: str | None = None) -> Any:
    """The object as the API shows it now; a 404 is the object deleted (``deleted: true``)."""
    path = path or resource_path(object_type, object_id)
    if path is None:
        raise ApiError(f"no API path for a {object_type!r}")
    try:
        return _get(endpoint, path)
    except stripe.StripeError:  # 404 only: _get turned every other error into ApiError
        return {"id": object_id, "object": object_type, "deleted": True}


def current_object(endpoint: Endpoint, ref: ObjectRef, thin: bool) -> ObjectRef:
    """``ref`` with Stripe's current state of its object (a thin event's ``related_object.url``,
    else the type's resource path), versioned by the fetch time so that a state fetched later
    always wins and an older snapshot never overwrites it. ``FetchError`` when there is none."""
    path = None
    if thin:
        path = ref.state["related_object"].get("url")
        if not isinstance(path, str) or not path.startswith("/"):
            raise FetchError("thin event without a related_object.url")
    try:
        state = retrieve(endpoint, ref.type, ref.id, path)
    except ApiError as exc:
        raise FetchError(str(exc)) from None
    return dataclasses.replace(ref, state=state, version=max(ref.version, api.fresh_version()))


def events(endpoint: Endpoint, since: int, *, undelivered: bool = False) -> Iterator[dict[str, Any]]:
    """Every event created at or after ``since`` (unix seconds), newest first, page by page.

    ``undelivered``: only those Stripe has not delivered yet (``delivery_success=false``).
    """
    params: dict[str, Any] = {"limit": PAGE, "created": {"gte": since}}
    if undelivered:
        params["delivery_success"] = "false"
    while True:
        try:
            page = _get(endpoint, "/v1/events", **params)
        except stripe.StripeError:
            raise ApiError("/v1/events answered 404") from None
        data = page.get("data") if isinstance(page, dict) else None
        if not isinstance(data, list):
            raise ApiError("/v1/events answered no list")
        yield from (event for event in data if isinstance(event, dict))
        if not page.get("has_more") or not data:
            return
        params["starting_after"] = data[-1]["id"]


__all__ = ["API_RATE", "ApiError", "client", "current_object", "events", "resource_path", "retrieve", "throttle"]
