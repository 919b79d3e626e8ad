"""Mercado Pago's API: the payment a notification names, as Mercado Pago shows it now (worker side: I/O).

``mercadopago.py`` stays sans-I/O and loads this module only inside its ``refetch``.
``GET <api_base>/v1/payments/<id>`` with ``Authorization: Bearer <access_token>``; ``api_base``
defaults to https://api.mercadopago.com and may name only that host or this machine (the tests'
fake, checked by ``validate``); redirects are not followed. A 404, or an answer that is not that
payment, is ``MismatchError`` (fail at once, no handler); network, 401, 429 and 5xx are
``FetchError`` (RQ retries with backoff). Each call waits at most the endpoint's
``outbound_timeout``, reads at most ``LIMIT`` bytes, and shares the endpoint's budget (``API_RATE``
a second per process, by waiting).
Docs: https://www.mercadopago.com/developers/en/reference/payments/_payments_id/get
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from webhooks.providers import api
from webhooks.providers.api import MismatchError
from webhooks.providers.base import Endpoint

MERCADOPAGO_API = "https://api.mercadopago.com"
API_RATE = 20.0  # requests a second per endpoint and process
LIMIT = 1 << 20  # bytes of one answer


def payment(endpoint: Endpoint, payment_id: str) -> dict[str, Any]:
    """Mercado Pago's current copy of the payment ``payment_id``."""
    if not payment_id:
        raise MismatchError("the notification names no payment")
    base = str(endpoint.options.get("api_base") or MERCADOPAGO_API).rstrip("/")
    found = api.bearer_json(
        endpoint,
        f"{base}/v1/payments/{urllib.parse.quote(payment_id, safe='')}",
        endpoint.options.get("access_token"),
        who="Mercado Pago",
        accept="application/json",
        missing=f"Mercado Pago has no payment {payment_id!r}: the notification is not Mercado Pago's",
        rate=API_RATE,
        limit=LIMIT,
    )
    if not isinstance(found, dict) or str(found.get("id")) != payment_id:
        raise MismatchError(f"Mercado Pago's answer for {payment_id!r} is not that payment")
    return found
