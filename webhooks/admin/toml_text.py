"""A stored item's options written back as the body of a TOML table, for the console's edit form
(``tomllib`` reads TOML but does not write it). Options come from JSON: text, numbers, booleans,
lists and tables."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

BARE = re.compile(r"[A-Za-z0-9_-]+")


def _key(key: str) -> str:
    return key if BARE.fullmatch(key) else json.dumps(key)


def value(v: Any) -> str:
    """One value in TOML's inline syntax (a JSON string is a valid TOML basic string)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float | str):
        return json.dumps(v)
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{_key(str(k))} = {value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list | tuple):
        return "[" + ", ".join(value(x) for x in v) + "]"
    raise TypeError(f"no TOML for {type(v).__name__}")


def dumps(table: Mapping[str, Any]) -> str:
    """``table`` as ``key = value`` lines (None values, which TOML lacks, left out)."""
    return "".join(f"{_key(k)} = {value(v)}\n" for k, v in table.items() if v is not None)
