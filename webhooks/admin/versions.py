"""What an object version means, in words, for the console (``providers`` keep the formulas).

A version only orders the states of one object; each provider kind packs it differently:

- stripe: ``created`` in ms × 10 + a lifecycle rank (0 created, 1 update, 2 terminal);
- adyen: the number of notifications folded into the payment's state; rows stored before the
  fold carry ``stage × 10^14`` + ``eventDate`` in ms (stage 1 authorisation … 4 dispute);
- github, paypal: the object's own update (or creation) time in ms.

Other kinds, and numbers no formula produced, read as a plain "version N".
"""

from __future__ import annotations

from datetime import UTC, datetime

STRIPE_RANKS = {0: "created", 1: "update", 2: "terminal"}
ADYEN_STAGES = {1: "authorisation", 2: "capture", 3: "cancel or refund", 4: "dispute"}
ADYEN_STAGE = 10**14
TIMED = {"github": "updated", "paypal": "updated"}


def _time(ms: int) -> str | None:
    """Unix milliseconds as ``2024-05-01 10:00:00 UTC`` (with .mmm when it has them); None if out of range."""
    try:
        at = datetime.fromtimestamp(ms / 1000, UTC)
    except (OverflowError, OSError, ValueError):
        return None
    text = at.strftime("%Y-%m-%d %H:%M:%S")
    return (f"{text}.{ms % 1000:03d}" if ms % 1000 else text) + " UTC"


def describe(kind: str, version: int | None) -> str | None:
    """The version of an object of provider ``kind`` in words; None when there is none."""
    if version is None:
        return None
    plain = f"version {version}"
    if version < 0:
        return plain
    if kind == "stripe":
        ms, rank = divmod(version, 10)
        at = _time(ms)
        return f"created {at}, rank {STRIPE_RANKS[rank]}" if at and rank in STRIPE_RANKS else plain
    if kind == "adyen":
        if 0 < version < ADYEN_STAGE:
            return f"fold of {version} notification(s)"
        stage, ms = divmod(version, ADYEN_STAGE)
        if stage not in ADYEN_STAGES:
            return plain
        at = _time(ms) if ms else None
        return f"stage {stage} ({ADYEN_STAGES[stage]}), eventDate {at or 'missing'}"
    if kind in TIMED and version > 0:
        at = _time(version)
        return f"{TIMED[kind]} {at}" if at else plain
    return plain


def unix_time(seconds: int | None) -> str | None:
    """A signed timestamp (unix seconds) as ISO UTC; None when there is none or it is out of range."""
    if seconds is None:
        return None
    try:
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return None
