"""The checks every ``[destinations.<name>]`` option goes through, shared by the common options
(``webhooks.configuration.destinations``) and each bus kind's own (``webhooks.configuration.buses``):
each mistake is a ``ConfigError`` naming the destination (``where``) and the option."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhooks.errors import ConfigError


def number(where: str, raw: Mapping[str, Any], name: str, default: Any, *, whole: bool = False) -> Any:
    value = raw.get(name, default)
    if value is None:
        return None
    is_number = isinstance(value, int) or (isinstance(value, float) and not whole)
    if isinstance(value, bool) or not is_number or value <= 0:
        raise ConfigError(f"{where}: {name} must be a positive {'whole ' if whole else ''}number")
    return value


def flag(where: str, raw: Mapping[str, Any], name: str) -> bool:
    value = raw.get(name, False)
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: {name} must be true or false")
    return value


def strings(where: str, raw: Mapping[str, Any], name: str) -> list[str]:
    value = raw.get(name, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(f"{where}: {name} must be a list of non-empty strings")
    return [v.strip() for v in value]


def required(where: str, raw: Mapping[str, Any], option: str, kind: str, example: str) -> str:
    value = raw.get(option)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f'{where}: {option} is required for destination kind {kind} ({option} = "{example}")')
    return value.strip()


def optional(where: str, raw: Mapping[str, Any], option: str) -> str | None:
    value = raw.get(option)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ConfigError(f"{where}: {option} must be a non-empty string")
    return value.strip() if isinstance(value, str) else None


def one_of(where: str, raw: Mapping[str, Any], option: str, choices: tuple[str, ...]) -> str:
    """``option``'s value among ``choices`` (the first when absent)."""
    value = raw.get(option, choices[0])
    if value not in choices:
        raise ConfigError(f"{where}: {option} must be one of {', '.join(choices)}, not {value!r}")
    return str(value)
