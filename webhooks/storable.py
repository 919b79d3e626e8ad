"""What makes a value storable on both databases: PostgreSQL refuses NUL (text and JSONB), lone
surrogates anywhere, non-finite numbers in JSONB and values over a column's width, all of which
SQLite takes. ``storable_text`` / ``storable_json`` replace such characters with U+FFFD (and
NaN/Infinity with null, as ``JSON.stringify`` does); ``storable_key`` maps a key that does not fit
to a stable ``sha256:<hex>``; ``redact`` keeps request headers fit to store.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any

_UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")
SHA_PREFIX = "sha256:"


def is_storable(value: str) -> bool:
    """Whether both databases store ``value`` as it is (PostgreSQL refuses NUL and lone surrogates)."""
    return _UNSTORABLE.search(value) is None


def storable_text(value: str) -> str:
    """``value`` with NUL and lone surrogates (PostgreSQL refuses both) replaced by U+FFFD."""
    return _UNSTORABLE.sub("\ufffd", value)


def storable_json(value: Any) -> Any:
    """A copy of a parsed JSON value that both databases store: strings and keys through
    ``storable_text``, NaN and ±Infinity as null. Unchanged values are returned as they are."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {storable_text(str(k)): storable_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [storable_json(v) for v in value]
    return value


def storable_key(value: str, width: int) -> str:
    """``value`` if a ``String(width)`` key column stores it as is on both databases, else a stable
    ``sha256:<hex>`` of it (the same value always maps to the same key)."""
    if len(value) <= width and not _UNSTORABLE.search(value) and not value.startswith(SHA_PREFIX):
        return value
    return SHA_PREFIX + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


REDACTED = frozenset({"authorization", "cookie", "proxy-authorization", "x-api-key"})


def redact(headers: dict[str, str]) -> dict[str, str]:
    """Request headers fit to store: credentials replaced, signatures kept (they prove nothing later)."""
    return {k: ("[redacted]" if k.lower() in REDACTED else v) for k, v in headers.items()}
