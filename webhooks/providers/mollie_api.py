"""Mollie's API: the payment a classic webhook names, as Mollie shows it now (worker side: I/O).

``mollie.py`` stays sans-I/O and loads this module only inside its ``refetch`` (and its host check
in ``validate``). ``GET <api_base>/v2/payments/<id>`` with ``Authorization: Bearer <api_key>``;
``api_base`` defaults to https://api.mollie.com and may name only that host or this machine (the
tests' fake): the key is never sent anywhere else, and redirects are not followed. A 404 is
``UnknownObjectError`` (anyone may name a payment: the event is ``ignored`` as ``unknown_object``,
and the id is not asked again for a minute, ``api.MISSING``); an answer that is not that payment is
``MismatchError`` (fail at once, no handler); network, 401, 429 and 5xx are ``FetchError`` (RQ
retries with backoff). Each call waits at most the endpoint's ``outbound_timeout``, reads at most
``LIMIT`` bytes, and shares the endpoint's budget (``API_RATE`` a second per process, by waiting).
Docs: https://docs.mollie.com/reference/get-payment
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from webhooks.providers import api
from webhooks.providers.api import MismatchError
from webhooks.providers.base import Endpoint

MOLLIE_API = "https://api.mollie.com"
API_RATE = 20.0  # requests a second per endpoint and process (Mollie allows more; junk must not use it all)
LIMIT = 1 << 20  # bytes of one answer


def payment(endpoint: Endpoint, payment_id: str) -> dict[str, Any]:
    """Mollie's current copy of the payment ``payment_id``."""
    base = str(endpoint.options.get("api_base") or MOLLIE_API).rstrip("/")
    found = api.bearer_json(
        endpoint,
        f"{base}/v2/payments/{urllib.parse.quote(payment_id, safe='')}",
        endpoint.options.get("api_key"),
        who="Mollie",
        accept="application/hal+json",
        missing=f"Mollie has no payment {payment_id!r}: the delivery is not Mollie's",
        rate=API_RATE,
        limit=LIMIT,
        unsigned=not endpoint.secrets,  # classic: the nudge is anyone's
    )
    if not isinstance(found, dict) or found.get("resource") != "payment" or found.get("id") != payment_id:
        raise MismatchError(f"Mollie's answer for {payment_id!r} is not that payment")
    return found
