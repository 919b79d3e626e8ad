"""The database's runtime configuration as every process holds it (#32): the items with their
live secrets opened, read again on every change.

With 10 000 endpoints a change must still reach every process within a second, so a read is
cheap where nothing changed: the rows come as plain tuples (no ORM objects), and an item whose row
and secrets are what they were (``Snapshot.keys``, passed back as ``previous``) is the same
``Item`` object as before, its secrets not decrypted again; ``webhooks.live_config.merged`` then
keeps the endpoint or destination it built from that object.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from webhooks.config_tables import SIGNING, ConfigChange, ConfigItem, ConfigSecret, ConfigVersion
from webhooks.keys import Keyring, UndecryptableError, UnknownKeyError, key_id_of
from webhooks.live_config import ENDPOINT, Item, joined
from webhooks.timestamps import aware

TABLE = "config_secrets"  # bound into each token: a token copied to another table does not open
ITEMS = select(ConfigItem.__table__).order_by(ConfigItem.name)
SECRETS = select(ConfigSecret.__table__).order_by(ConfigSecret.created_at, ConfigSecret.id)
VERSION = select(ConfigVersion.version).where(ConfigVersion.id == 1)
LAST_CHANGE = select(func.max(ConfigChange.id))
# A change's ``target`` is "<kind> <name>": the actions that change one item and bump the version.
ITEM_ACTIONS = frozenset({"create", "update", "delete", "add_secret", "expire_secret", "rotate"})
MAX_CHANGED = 100  # more changes than this since the held version: one full read instead


@dataclass(frozen=True)
class Snapshot:
    """The database's items with their secrets opened, as of ``version``."""

    version: int
    items: tuple[Item, ...]
    broken: tuple[tuple[str, str], ...]  # (name, why) of items whose secrets do not open
    next_change: datetime | None  # when a secret's window opens or closes next: reload then
    keys: Mapping[str, tuple[Hashable, Item]] = field(default_factory=dict, repr=False)  # the next read's ``previous``
    last_change: int = 0  # the newest ``config_changes`` id it holds (where ``changed_since`` reads on)


@dataclass(frozen=True)
class Changed:
    """What changed since a held snapshot, read without reading every item (``changed_since``)."""

    version: int
    last_change: int
    items: dict[str, tuple[Hashable, Item] | None]  # name → its new key and item (None: deleted)
    broken: dict[str, str]  # name → why its secrets do not open
    next_change: datetime | None  # the earliest window of the changed items' secrets


def live(secret: ConfigSecret, now: datetime) -> bool:
    starts, ends = secret.not_before, secret.expires_at
    return (starts is None or aware(starts) <= now) and (ends is None or aware(ends) > now)


def snapshot(
    session: Session,
    keyring: Keyring | None,
    *,
    now: datetime,
    previous: Mapping[str, tuple[Hashable, Item]] | None = None,
) -> Snapshot:
    """Every item with its live secrets opened. ``UnknownKeyError`` (naming the key id) when a
    secret is sealed under a key not configured, so start-up fails closed; an item whose token
    does not open (altered, copied) is ``broken`` instead, and left out. ``previous``: the last
    snapshot's ``keys``, whose unchanged items are taken as they are."""
    last_change = int(session.scalar(LAST_CHANGE) or 0)  # (first: a change between reads is read again)
    at = int(session.scalar(VERSION) or 0)
    # Rows, not ORM objects: they have the same attributes, at a fraction of the cost.
    stored = cast(list[ConfigItem], session.execute(ITEMS).all())
    sealed: dict[str, list[ConfigSecret]] = {}
    for secret in cast(list[ConfigSecret], session.execute(SECRETS).all()):
        sealed.setdefault(secret.item_name, []).append(secret)
    session.commit()
    found, broken, boundaries, keys = [], [], [], {}
    for item in stored:
        mine = sealed.get(item.name, [])
        boundaries += [aware(e) for s in mine for e in (s.not_before, s.expires_at) if e is not None and aware(e) > now]
        key = _key(item, mine, now)
        kept = previous.get(item.name) if previous else None
        if kept is not None and kept[0] == key:
            found.append(kept[1])
            keys[item.name] = kept
            continue
        try:
            opened_item = Item(item.kind, item.name, *_opened(keyring, item, mine, now))
        except UndecryptableError as exc:
            broken.append((item.name, str(exc)))
            continue
        found.append(opened_item)
        keys[item.name] = (key, opened_item)
    return Snapshot(at, tuple(found), tuple(broken), min(boundaries, default=None), keys, last_change)


def changed_since(
    session: Session, keyring: Keyring | None, *, version: int, last_change: int, now: datetime
) -> Changed | None:
    """The endpoints changed since ``version`` (whose newest change is ``last_change``), read by
    name: what a reload at 10 000 endpoints costs when one changed. None when a full read is
    needed: a destination changed (an endpoint's ``forward`` is checked against them), a change
    that is not one item's (a key rotation), more than ``MAX_CHANGED``, or a gap: each item change
    bumps the version once in its own transaction, so fewer changes visible than versions gained
    means one committed out of order (read in full, nothing missed)."""
    at = int(session.scalar(VERSION) or 0)
    rows = session.execute(
        select(ConfigChange.id, ConfigChange.action, ConfigChange.target)
        .where(ConfigChange.id > last_change)
        .order_by(ConfigChange.id)
        .limit(MAX_CHANGED + 1)
    ).all()
    names: set[str] = set()
    for _, action, target in rows:
        kind, _, name = str(target).partition(" ")
        if action not in ITEM_ACTIONS or kind != ENDPOINT:
            return None
        names.add(name)
    if len(rows) > MAX_CHANGED or at - version != len(rows):
        return None
    stored = {i.name: i for i in cast(list[ConfigItem], session.execute(ITEMS.where(ConfigItem.name.in_(names))).all())}
    sealed: dict[str, list[ConfigSecret]] = {}
    for secret in cast(list[ConfigSecret], session.execute(SECRETS.where(ConfigSecret.item_name.in_(names))).all()):
        sealed.setdefault(secret.item_name, []).append(secret)
    session.commit()
    found: dict[str, tuple[Hashable, Item] | None] = {}
    broken: dict[str, str] = {}
    boundaries: list[datetime] = []
    for name in sorted(names):
        item = stored.get(name)
        if item is None or item.kind != ENDPOINT:
            found[name] = None
            continue
        mine = sealed.get(name, [])
        boundaries += [aware(e) for s in mine for e in (s.not_before, s.expires_at) if e is not None and aware(e) > now]
        try:
            found[name] = (_key(item, mine, now), Item(item.kind, name, *_opened(keyring, item, mine, now)))
        except UndecryptableError as exc:
            broken[name] = str(exc)
    last = max((row[0] for row in rows), default=last_change)
    return Changed(at, last, found, broken, min(boundaries, default=None))


def _key(item: ConfigItem, secrets: list[ConfigSecret], now: datetime) -> Hashable:
    """What an item's opened table depends on: its row (an update moves ``updated_at``; a name
    deleted and created again has another ``created_at``) and each secret's token and liveness."""
    sealed = tuple((s.id, s.purpose, s.ciphertext, s.expires_at, s.not_before, live(s, now)) for s in secrets)
    return (item.kind, item.provider, item.label, item.created_at, item.updated_at, repr(item.options), sealed)


def opened_table(
    keyring: Keyring | None, item: ConfigItem, secrets: list[ConfigSecret], now: datetime
) -> dict[str, Any]:
    """``item``'s table as the file would hold it: its options, credentials and live signing
    secrets opened (a rotation's new secret first)."""
    return _opened(keyring, item, secrets, now)[0]


def _opened(
    keyring: Keyring | None, item: ConfigItem, secrets: list[ConfigSecret], now: datetime
) -> tuple[dict[str, Any], tuple[str, ...], tuple[tuple[float | None, float | None], ...]]:
    """``opened_table``, the ids of its signing secrets in their order (``Endpoint.secret_ids``)
    and their windows (``Endpoint.windows``; () when none ends or starts).

    An endpoint with no live signing secret (the last one lapsed, or ``not_before`` ahead) is a
    valid state that refuses every delivery (``no_live_secret``), not a bad row: its secrets are
    given with their windows, which the receiver applies at each request, so a running process and
    a restarted one refuse alike, from the moment the window closes."""
    signing, ids, windows, credentials = [], [], [], {}
    ordered = sorted(secrets, key=_signing_order)
    none_live = item.kind == ENDPOINT and not any(s.purpose == SIGNING and live(s, now) for s in ordered)
    for secret in ordered:
        if secret.purpose != SIGNING:
            credentials[secret.purpose] = opened(keyring, item.name, secret)
        elif live(secret, now) or none_live:
            signing.append(opened(keyring, item.name, secret))
            ids.append(secret.id)
            windows.append((_seconds(secret.not_before), _seconds(secret.expires_at)))
    bounded = tuple(windows) if any(w != (None, None) for w in windows) else ()
    return joined(_table(item), signing, credentials), tuple(ids), bounded


def _seconds(at: datetime | None) -> float | None:
    return None if at is None else aware(at).timestamp()


def _signing_order(secret: ConfigSecret) -> tuple[bool, float, datetime]:
    """Secrets that do not end first (a rotation's new one signs first), then the latest to end."""
    ends = secret.expires_at
    return (ends is not None, -aware(ends).timestamp() if ends else 0.0, aware(secret.created_at))


def _table(item: ConfigItem) -> dict[str, Any]:
    options = dict(item.options)
    if item.kind == ENDPOINT and item.provider:
        options["provider"] = item.provider
    return options


def opened(keyring: Keyring | None, name: str, secret: ConfigSecret) -> str:
    if keyring is None:  # sealed, and no key at all: the same one line as a key missing
        raise UnknownKeyError(key_id_of(secret.ciphertext))
    return keyring.decrypt(secret.ciphertext, table=TABLE, owner=name, secret_id=secret.id).decode()
