"""The database's runtime configuration as every process holds it (#32): the items with their
live secrets opened, read again on every change.

With 10 000 endpoints a change must still reach every process within a second, so a read is
cheap where nothing changed: the rows come as plain tuples (no ORM objects), and an item whose row
and secrets are what they were (``Snapshot.keys``, passed back as ``previous``) is the same
``Item`` object as before, its secrets not decrypted again; ``webhooks.configuration.live.merged`` then
keeps the endpoint or destination it built from that object.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Select, func, select
from sqlalchemy.exc import DataError
from sqlalchemy.orm import Session

from webhooks.configuration.keys import Keyring, UndecryptableError, UnknownKeyError, key_id_of
from webhooks.configuration.live import ENDPOINT, Item, bound_to, joined
from webhooks.tables.configuration import SIGNING, ConfigChange, ConfigItem, ConfigSecret, ConfigVersion
from webhooks.timestamps import aware

log = logging.getLogger(__name__)
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


# What reading a stored value can raise when the row holds what the driver cannot turn into a
# Python value (a time before year 1 in UTC, a malformed SQLite text): that row is bad, not the read.
UNREADABLE = (DataError, ValueError, OverflowError, TypeError)


def readable(session: Session, query: Select[Any], key: Any, *, scalars: bool = False) -> tuple[list[Any], list[str]]:
    """``query``'s rows (``scalars``: its ORM objects), and the ``key`` values of rows that cannot be
    read: read all at once, and only when that fails one by one, so one bad row costs a listing
    or a reload that row alone (#37), never the whole configuration."""
    try:
        result = session.execute(query)
        return list(result.scalars() if scalars else result.all()), []
    except UNREADABLE as exc:  # raised converting a fetched value: the transaction itself is sound
        log.error("runtime configuration: a stored row cannot be read (%s); reading row by row", _why(exc))
    found: list[Any] = []
    bad: list[str] = []
    for value in session.scalars(query.with_only_columns(key)).all():
        try:
            result = session.execute(query.where(key == value))
            found += result.scalars() if scalars else result.all()
        except UNREADABLE:
            bad.append(str(value))
    return found, bad


def _why(exc: BaseException) -> str:
    return str(getattr(exc, "orig", None) or exc).splitlines()[0][:200]


def unreadable_owners(session: Session, secret_ids: list[str]) -> dict[str, str]:
    """The items of secrets that cannot be read, each with why (what an operator repairs)."""
    if not secret_ids:
        return {}
    query = select(ConfigSecret.item_name, ConfigSecret.id).where(ConfigSecret.id.in_(secret_ids))
    return {
        name: f"its secret {sid} holds a value the database driver cannot read (a time out of range?): repair the row"
        for name, sid in session.execute(query).all()
    }


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
    rows, bad_items = readable(session, ITEMS, ConfigItem.name)
    stored = cast(list[ConfigItem], rows)
    secret_rows, bad_secrets = readable(session, SECRETS, ConfigSecret.id)
    sealed: dict[str, list[ConfigSecret]] = {}
    for secret in cast(list[ConfigSecret], secret_rows):
        sealed.setdefault(secret.item_name, []).append(secret)
    unread = {name: "its row holds a value the database driver cannot read: repair the row" for name in bad_items}
    unread |= unreadable_owners(session, bad_secrets)
    session.commit()
    found: list[Item] = []
    broken = sorted(unread.items())
    boundaries: list[datetime] = []
    keys: dict[str, tuple[Hashable, Item]] = {}
    for item in stored:
        if item.name in unread:
            continue
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
    try:
        items = cast(list[ConfigItem], session.execute(ITEMS.where(ConfigItem.name.in_(names))).all())
        secrets = cast(list[ConfigSecret], session.execute(SECRETS.where(ConfigSecret.item_name.in_(names))).all())
    except UNREADABLE:  # a row the driver cannot read: the full read finds it and refuses it alone
        session.rollback()
        return None
    stored = {i.name: i for i in items}
    sealed: dict[str, list[ConfigSecret]] = {}
    for secret in secrets:
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
            credentials[secret.purpose] = opened(keyring, item, secret)
        elif live(secret, now) or none_live:
            signing.append(opened(keyring, item, secret))
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


def bound(item: ConfigItem, purpose: str) -> str:
    """What ``item``'s secret of ``purpose`` is sealed bound to: where its credentials go, as its
    clear options say now ("" for a signing secret, which is never sent)."""
    return "" if purpose == SIGNING else bound_to(item.kind, _table(item))


def opened(keyring: Keyring | None, item: ConfigItem, secret: ConfigSecret) -> str:
    """``secret``'s value; ``UndecryptableError`` when its token is not ``item``'s, or ``item``'s
    clear options now send the credential elsewhere than when it was sealed."""
    if keyring is None:  # sealed, and no key at all: the same one line as a key missing
        raise UnknownKeyError(key_id_of(secret.ciphertext))
    return keyring.decrypt(
        secret.ciphertext,
        table=TABLE,
        owner=item.name,
        secret_id=secret.id,
        purpose=secret.purpose,
        bound=bound(item, secret.purpose),
    ).decode()


def sealed(keyring: Keyring, item: ConfigItem, secret_id: str, purpose: str, plain: bytes) -> str:
    """The token of ``plain`` as ``item``'s secret ``secret_id`` of ``purpose`` (``opened``'s inverse)."""
    return keyring.encrypt(
        plain, table=TABLE, owner=item.name, secret_id=secret_id, purpose=purpose, bound=bound(item, purpose)
    )
