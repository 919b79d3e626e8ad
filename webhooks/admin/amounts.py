"""The amount an event names, for the events list (its kind's ``Provider.amount``: e.g. Stripe's
``data.object.amount``/``currency``); read at render from the page's own rows, never stored."""

from __future__ import annotations

from decimal import Decimal

from webhooks import providers
from webhooks.errors import PayloadError
from webhooks.tables.events import Event

MAX_PARSED = 256 * 1024  # a bigger payload is not parsed for a list cell (its page shows it all)
# ISO 4217 minor units that are not 2 (the currencies the providers list).
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
    """The event's amount as text, or None when its provider names none (``Provider.amount``) or
    the payload is big."""
    provider = providers.PROVIDERS.get(event.kind)
    if provider is None or len(event.payload) > MAX_PARSED:
        return None
    try:
        found = provider.amount(event.payload, None if event.body_digest is not None else event.item_index)
    except PayloadError:
        return None
    return None if found is None else shown(*found)
