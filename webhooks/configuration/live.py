"""Endpoints and destinations kept in the database (#32), read as the file's own tables.

An item is its TOML table as JSON. ``split`` takes the credentials out of it (the signing
``secrets``, the options in ``CREDENTIALS``, a destination URL with a query string or userinfo):
those are sealed in ``config_secrets``, the rest is ``config_items.options``. ``check`` validates a
table with the file's builders (``webhooks.configuration.settings``): one wording, one set of rules. ``merged``
lays the database's items over the file's ``Settings``: the file wins, names are unique across
both kinds, and an item that fails validation is skipped (reported to ``skipped``), never fatal.
Values ``env:NAME`` are the file's: an item from the API may not read the process's environment.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from webhooks import guard
from webhooks.configuration import settings as config
from webhooks.configuration.destinations import forwards, redacted
from webhooks.configuration.settings import Settings
from webhooks.errors import ConfigError

ENDPOINT = "endpoint"
DESTINATION = "destination"
# Options of any kind that hold a credential: sealed like signing secrets, listed as fingerprints.
CREDENTIALS = frozenset(
    {
        "basic_auth",
        "api_key",
        "access_token",
        "client_secret",
        "secret_key",
        "password",
        "access_key_id",  # an sqs destination's AWS credentials
        "secret_access_key",
        "sasl_password",  # a kafka destination's SASL password
    }
)
URL = "url"  # a destination's URL is a credential when its query string or userinfo may hold a token
# The clear options that say where an item's credentials are sent: each credential is sealed bound
# to them (``bound_to``), so an edit of them outside the admin API leaves it unopenable (#37).
WHERE = (
    "kind",
    "provider",
    "api_base",
    "region",
    "url",
    "queue_url",
    "endpoint_url",
    "bootstrap_servers",
    "security_protocol",
    "allow_private",
)


@dataclass(frozen=True)
class Item:
    """One database item with its secrets opened: what ``merged`` validates and lays over the file."""

    kind: str
    name: str
    table: Mapping[str, Any] = field(repr=False)
    secret_ids: tuple[str, ...] = ()  # the ids of ``table``'s signing secrets, in their order
    windows: tuple[tuple[float | None, float | None], ...] = ()  # their windows (``Endpoint.windows``)


def secret_url(url: Any) -> bool:
    """Whether a destination URL carries something to keep sealed: a query string or userinfo."""
    if not isinstance(url, str):
        return False
    parts = urlsplit(url)
    return bool(parts.query or parts.username or parts.password)


def split(kind: str, table: Mapping[str, Any]) -> tuple[dict[str, Any], list[str], dict[str, str]]:
    """``table`` as (options kept in clear, signing secrets, credential option → value)."""
    options = dict(table)
    signing = options.pop("secrets", options.pop("secret", []))
    if isinstance(signing, str):
        signing = [signing]
    credentials = {k: str(options.pop(k)) for k in sorted(CREDENTIALS & set(options)) if options[k] is not None}
    if kind == DESTINATION and secret_url(options.get(URL)):
        credentials[URL] = options[URL]
        options[URL] = redacted(options[URL])
    return options, [str(s) for s in signing], credentials


def bound_to(kind: str, table: Mapping[str, Any]) -> str:
    """What a credential of an item of ``kind`` with ``table``'s clear options is bound to: the
    options in ``WHERE``, as canonical JSON (a signing secret is sent nowhere: bound to "")."""
    where = {k: table[k] for k in WHERE if k in table}
    return json.dumps({"item": kind, **where}, sort_keys=True, separators=(",", ":"), default=str)


def joined(options: Mapping[str, Any], signing: Iterable[str], credentials: Mapping[str, str]) -> dict[str, Any]:
    """The table ``split`` took apart (with the signing secrets live now)."""
    return {**options, **credentials, "secrets": list(signing)}


def check(kind: str, name: str, table: Mapping[str, Any], destinations: Collection[str]) -> None:
    """Validate ``table`` as the file would (``ConfigError`` naming the problem); an endpoint's
    ``forward`` must name destinations in ``destinations``."""
    _refuse_env(kind, name, table)
    if kind == ENDPOINT:
        config.build_endpoint(name, table, {})
        if table.get("forward"):
            forwards(name, table["forward"], destinations)
    elif kind == DESTINATION:
        if secret_url(table.get(URL)) and redacted(table[URL]) == table[URL]:  # a listing's URL sent back
            raise ConfigError(
                f"destination {name!r}: url is the redacted one (***): send the whole URL, or leave url out"
            )
        config.build_destination(name, table, {}, guard.no_lookup)
    else:
        raise ConfigError(f"unknown item kind {kind!r}")


def _refuse_env(kind: str, name: str, value: Any) -> None:
    if isinstance(value, str) and value.startswith("env:"):
        raise ConfigError(f"{kind} {name!r}: env: values are the file's; send the value itself")
    for item in value.values() if isinstance(value, Mapping) else value if isinstance(value, list) else ():
        _refuse_env(kind, name, item)


def field_of(message: str) -> str | None:
    """The key a ``ConfigError`` message is about (``invalid_config``'s ``field``), if it names one."""
    rest = message.split("': ", 1)[-1]
    unknown = re.search(r"unknown key '([^']+)'", rest)
    if unknown:
        return unknown.group(1)
    if "provider" in rest.split(" ", 3)[:3]:
        return "provider"
    word = re.match(r"([a-z_]+)", rest)
    if word is None:
        return None
    return {"secret": "secrets", "no": "secrets", "an": "secrets", "env": None}.get(word.group(1), word.group(1))


def merged(
    file: Settings,
    items: Iterable[Item],
    skipped: Callable[[Item, str], None],
    built: dict[str, tuple[Item, Any]] | None = None,
    held: Settings | None = None,
    broken: Iterable[tuple[str, str]] = (),
) -> Settings:
    """``file``'s settings with ``items`` added: destinations first (an endpoint may forward to
    one), each validated by the file's builders; one that fails, or whose name is taken, is
    passed to ``skipped`` with why. A failing item that ``held`` (the snapshot in effect) has from
    the database keeps that one, so a bad row never takes down what worked ("its last valid
    configuration stays"); a new one is left out. ``built`` (name → the item and what was built
    from it, updated here) keeps what an unchanged item built last time: the same ``Item`` object
    (``webhooks.store.configuration.snapshot``) is not validated again. ``broken``: (name, why) of the
    items whose secrets did not open: refused the same way."""
    endpoints, destinations, forward = dict(file.endpoints), dict(file.destinations), dict(file.forwards)
    ordered = sorted(items, key=lambda item: (item.kind != DESTINATION, item.name))
    for name, why in broken:
        kind = ENDPOINT if held is not None and name in held.endpoints else DESTINATION
        stays = held is not None and _keep(held, Item(kind, name, {}), endpoints, destinations, forward)
        skipped(Item(kind, name, {}), f"{why}; its last valid configuration stays in effect" if stays else why)
    kept = dict(built or {})
    fresh: dict[str, tuple[Item, Any]] = {}
    for item in ordered:
        if item.name in endpoints or item.name in destinations:
            skipped(item, f"{item.kind} {item.name!r}: the name is taken by the file's")
            continue
        try:
            value = _built(file, item, kept.get(item.name))
            if item.kind == DESTINATION:
                destinations[item.name] = value
            else:
                endpoints[item.name] = value
                if item.table.get("forward"):
                    forward[item.name] = forwards(item.name, item.table["forward"], destinations)
        except ConfigError as exc:
            endpoints.pop(item.name, None)
            stays = held is not None and _keep(held, item, endpoints, destinations, forward)
            skipped(item, f"{exc}; its last valid configuration stays in effect" if stays else str(exc))
            continue
        fresh[item.name] = (item, value)
    if built is not None:
        built.clear()
        built.update(fresh)
    return replace(file, endpoints=endpoints, destinations=destinations, forwards=forward)


def changed(
    file: Settings,
    held: Settings,
    endpoints_changed: Mapping[str, Item | None],
    skipped: Callable[[Item, str], None],
    built: dict[str, tuple[Item, Any]],
) -> Settings:
    """``held`` with the database endpoints in ``endpoints_changed`` laid over it (None: deleted),
    each validated as ``merged`` does (a failing one keeps ``held``'s, or is left out): a reload
    that costs what changed, not what exists. The file's names win, as ever."""
    endpoints, forward = dict(held.endpoints), dict(held.forwards)
    destinations = dict(held.destinations)
    for name, item in endpoints_changed.items():
        if name in file.endpoints or name in file.destinations:
            if item is not None:
                skipped(item, f"{item.kind} {name!r}: the name is taken by the file's")
            continue
        built.pop(name, None)
        if item is None:
            endpoints.pop(name, None)
            forward.pop(name, None)
            continue
        try:
            value = _built(file, item, None)
            targets = forwards(name, item.table["forward"], destinations) if item.table.get("forward") else ()
        except ConfigError as exc:
            stays = name in held.endpoints
            skipped(item, f"{exc}; its last valid configuration stays in effect" if stays else str(exc))
            continue
        endpoints[name] = value
        forward.pop(name, None)
        if targets:
            forward[name] = targets
        built[name] = (item, value)
    return replace(held, endpoints=endpoints, destinations=destinations, forwards=forward)


def _keep(
    held: Settings, item: Item, endpoints: dict[str, Any], destinations: dict[str, Any], forward: dict[str, Any]
) -> bool:
    """Put ``held``'s ``item`` (its endpoint or destination, and what the endpoint forwards to) back."""
    if item.kind == DESTINATION and item.name in held.destinations:
        destinations[item.name] = held.destinations[item.name]
        return True
    if item.kind == ENDPOINT and item.name in held.endpoints:
        endpoints[item.name] = held.endpoints[item.name]
        targets = tuple(t for t in held.forwards.get(item.name, ()) if t in destinations)
        if targets:
            forward[item.name] = targets
        return True
    return False


def _built(file: Settings, item: Item, last: tuple[Item, Any] | None) -> Any:
    """The destination or endpoint ``item`` makes (the last one when ``item`` is the same object)."""
    if last is not None and last[0] is item:
        return last[1]
    if "env:" in repr(item.table):  # (the walk only when it may find one: 10 000 items reload in a second)
        _refuse_env(item.kind, item.name, item.table)
    if item.kind == DESTINATION:
        return config.build_destination(item.name, item.table, {}, guard.no_lookup)
    endpoint = config.build_endpoint(item.name, item.table, {})
    return replace(endpoint, outbound_timeout=file.outbound_timeout, secret_ids=item.secret_ids, windows=item.windows)
