"""Re-fetching an object's current state from the provider's API (worker side: I/O allowed).

Used for Stripe thin (v2) events, which carry no snapshot: with ``api_key`` set on the endpoint
(``api_key = "env:STRIPE_API_KEY"``; ``api_base`` defaults to https://api.stripe.com) the worker
GETs ``related_object.url`` and stores what the API answers as the object's state.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from webhooks.providers.base import Endpoint, ObjectRef

STRIPE_API = "https://api.stripe.com"


class FetchError(Exception):
    """The provider's API did not give the object's state; RQ retries the job."""


def needs_fetch(endpoint: Endpoint | None, ref: ObjectRef) -> bool:
    return (
        endpoint is not None
        and endpoint.provider == "stripe"
        and bool(endpoint.options.get("api_key"))
        and isinstance(ref.state, dict)
        and ref.state.get("snapshot") is False
    )


def stripe_object(endpoint: Endpoint, ref: ObjectRef, timeout: float = 10) -> Any:
    url = ref.state["related_object"].get("url")
    if not isinstance(url, str) or not url.startswith("/"):
        raise FetchError("thin event without a related_object.url")
    base = str(endpoint.options.get("api_base") or STRIPE_API).rstrip("/")
    request = urllib.request.Request(base + url, headers={"Authorization": f"Bearer {endpoint.options['api_key']}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 404:  # deleted since: that is its current state
            return {"id": ref.id, "object": ref.type, "deleted": True}
        raise FetchError(f"{base}{url} answered {exc.code}") from None
    except (urllib.error.URLError, TimeoutError, ValueError) as exc:
        raise FetchError(f"{base}{url}: {exc.__class__.__name__}") from None
