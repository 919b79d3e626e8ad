"""What kinds read out of a payload for people: times, versions as update times, amounts in minor
units (``describe_version`` and ``amount`` of ``webhooks.providers.base.Provider``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def time_text(ms: int) -> str | None:
    """Unix milliseconds as ``2024-05-01 10:00:00 UTC`` (with .mmm when it has them); None if out of range."""
    try:
        at = datetime.fromtimestamp(ms / 1000, UTC)
    except (OverflowError, OSError, ValueError):
        return None
    text = at.strftime("%Y-%m-%d %H:%M:%S")
    return (f"{text}.{ms % 1000:03d}" if ms % 1000 else text) + " UTC"


def updated_text(ms: int) -> str | None:
    """``describe_version`` of a kind whose version is the object's update time in ms."""
    at = time_text(ms) if ms > 0 else None
    return f"updated {at}" if at else None


def minor_amount(value: Any, currency: Any) -> tuple[int, str] | None:
    """``(value, currency)`` when they are an amount in minor units and an ISO 4217 code, else None."""
    if type(value) is not int or not isinstance(currency, str) or not currency.isalpha() or len(currency) != 3:
        return None
    return value, currency


def iso_ms(value: Any) -> int | None:
    """An ISO 8601 time (``Z`` allowed) as unix milliseconds; None when it is not one."""
    if not isinstance(value, str):
        return None
    try:
        return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None
