"""What an object version means, in words, for the console: each provider kind packs its versions
in its own way and says how to read them (``Provider.describe_version``, beside its formula in
``extract``); a kind without one, a kind no longer registered, and numbers no formula produced
read as a plain "version N"."""

from __future__ import annotations

from datetime import UTC, datetime

from webhooks.providers import PROVIDERS


def describe(kind: str, version: int | None) -> str | None:
    """The version of an object of provider ``kind`` in words; None when there is none."""
    if version is None:
        return None
    provider = PROVIDERS.get(kind)
    return (provider.describe_version(version) if provider is not None else None) or f"version {version}"


def unix_time(seconds: int | None) -> str | None:
    """A signed timestamp (unix seconds) as ISO UTC; None when there is none or it is out of range."""
    if seconds is None:
        return None
    try:
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return None
