"""The amount an event names, for the events list: Stripe's ``data.object.amount``/``currency``,
Adyen's ``amount.value``/``currency``; read at render from the page's own rows, never stored."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from webhooks import providers
from webhooks.models import Event

MAX_PARSED = 256 * 1024  # a bigger payload is not parsed for a list cell (its page shows it all)
# ISO 4217 minor units that are not 2 (the currencies Stripe and Adyen list).
ZERO = frozenset(
    (
        "BIF",
        "CLP",
        "DJF",
        "GNF",
        "ISK",
        "JPY",
        "KMF",
        "KRW",
        "MGA",
        "PYG",
        "RWF",
        "UGX",
        "VND",
        "VUV",
        "XAF",
        "XOF",
        "XPF",
    )
)
THREE = frozenset(("BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"))


def shown(value: int, currency: str) -> str:
    """``1130, "eur"`` → ``11.30 EUR``: minor units in the currency's own exponent."""
    code = currency.upper()
    places = 0 if code in ZERO else 3 if code in THREE else 2
    return f"{Decimal(value).scaleb(-places):,.{places}f} {code}"


def of(event: Event) -> str | None:
    """The event's amount as text, or None when its provider sends none (or the payload is big)."""
    if event.kind not in ("stripe", "adyen") or len(event.payload) > MAX_PARSED:
        return None
    try:
        data: Any = json.loads(event.payload)
    except ValueError:
        return None
    if event.kind == "stripe":
        obj = data.get("data", {}).get("object", {}) if isinstance(data, dict) else {}
        value, currency = (obj.get("amount"), obj.get("currency")) if isinstance(obj, dict) else (None, None)
    else:
        if event.body_digest is None and event.item_index is not None:
            data = providers.PROVIDERS["adyen"].batch_item(data, event.item_index)
        amount = data.get("amount") if isinstance(data, dict) else None
        value, currency = (amount.get("value"), amount.get("currency")) if isinstance(amount, dict) else (None, None)
    if type(value) is not int or not isinstance(currency, str) or not currency.isalpha() or len(currency) != 3:
        return None
    return shown(value, currency)
