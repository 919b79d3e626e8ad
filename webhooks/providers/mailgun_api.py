"""Mailgun's Events API: the copy of a delivered event that Mailgun itself holds (worker side: I/O).

``mailgun.py`` stays sans-I/O and loads this module only inside its ``refetch``. Mailgun signs a
timestamp and a token, never the event data, so with ``api_key`` and ``domain`` set only Mailgun's
own copy is acted on: the domain's event log is asked for the delivered event's message id around
its timestamp (``GET /v3/<domain>/events``, HTTP basic ``api:<api_key>``), and the item
with the delivered ``id`` is what handlers see. A copy that differs from the delivered event data in
what is acted on (``COMPARED``, and the message id) is ``MismatchError``: the event fails at once
and no handler runs. No copy yet is ``FetchError``: the log may lag the webhook, so RQ retries with
backoff, and an event Mailgun never logged ends failed, never acted on.
Host: ``region`` ``us`` (https://api.mailgun.net, the default) or ``eu`` (https://api.eu.mailgun.net);
``api_base`` overrides both (a test server). HTTP goes through ``webhooks.outbound``, each call
bounded by the endpoint's ``outbound_timeout`` and a size cap, calls sharing the endpoint's budget
(``API_RATE`` a second per process, by waiting).
Docs: https://documentation.mailgun.com/docs/mailgun/api-reference/openapi-final/tag/Events/
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from typing import Any

from webhooks import outbound
from webhooks.providers import api
from webhooks.providers.api import FetchError, MismatchError
from webhooks.providers.base import Endpoint
from webhooks.providers.mailgun_message import message_id

HOSTS = {"us": "https://api.mailgun.net", "eu": "https://api.eu.mailgun.net"}
API_RATE = 10.0  # requests a second per endpoint and process
COMPARED = ("id", "event", "recipient", "severity", "reason")
LIMIT = 300  # Mailgun's largest page; one message's events in a three-second window fit in it
MAX_ANSWER = 4 * 1024 * 1024  # a page of 300 events is well under this


def base_url(endpoint: Endpoint) -> str:
    options = endpoint.options
    return str(options.get("api_base") or HOSTS[str(options.get("region") or "us")]).rstrip("/")


def event(endpoint: Endpoint, delivered: Any) -> Any:
    """Mailgun's copy of the delivered ``event-data``, checked against it."""
    event_id = delivered.get("id") if isinstance(delivered, dict) else None
    at = delivered.get("timestamp") if isinstance(delivered, dict) else None
    if not isinstance(event_id, str) or isinstance(at, bool) or not isinstance(at, int | float):
        raise MismatchError("the delivered Mailgun event has no id or timestamp")
    # Not filtered by the delivered type: a relabelled type must find the genuine copy, and differ.
    query: dict[str, str | int] = {"begin": int(at) - 1, "end": int(at) + 2, "limit": LIMIT}
    if mid := message_id(delivered):
        query["message-id"] = mid
    domain = urllib.parse.quote(str(endpoint.options["domain"]), safe="")
    items = _get(endpoint, f"{base_url(endpoint)}/v3/{domain}/events?{urllib.parse.urlencode(query)}")
    copy = next((item for item in items if isinstance(item, dict) and item.get("id") == event_id), None)
    if copy is None:
        raise FetchError(f"Mailgun's event log has no event {event_id!r} (yet)")
    differ = [k for k in COMPARED if copy.get(k) != delivered.get(k)]
    if message_id(copy) != message_id(delivered):
        differ.append("message-id")
    if differ:
        raise MismatchError(f"Mailgun's copy of {event_id!r} differs from the delivered body in {', '.join(differ)}")
    return copy


def _get(endpoint: Endpoint, url: str) -> list[Any]:
    api.throttle(endpoint, API_RATE)
    basic = base64.b64encode(f"api:{endpoint.options['api_key']}".encode()).decode()
    try:
        answer = outbound.call(
            url, headers={"Authorization": f"Basic {basic}"}, timeout=endpoint.outbound_timeout, limit=MAX_ANSWER
        )
    except outbound.Unreachable as exc:
        raise FetchError(f"Mailgun {exc}") from None
    if answer.status >= 300:
        raise FetchError(f"Mailgun's event log answered {answer.status}")
    if len(answer.body) > MAX_ANSWER:
        raise FetchError("Mailgun's event log answered more than a page")
    try:
        items = json.loads(answer.body)["items"]
    except (ValueError, KeyError, TypeError):
        raise FetchError("Mailgun's event log answered no items") from None
    if not isinstance(items, list):
        raise FetchError("Mailgun's event log answered no list of items")
    return items
