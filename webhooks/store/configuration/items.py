"""Runtime configuration in the database (#32): endpoints and destinations, their sealed secrets,
the audit of every change and the version every process watches.

Each write is one transaction: the change itself, one ``config_changes`` row (secrets only as
fingerprints) and the bump of ``config_version``; on PostgreSQL the same transaction notifies
``CHANNEL`` (delivered at commit), so every process reloads within a second of the commit.
Validation is the caller's (``webhooks.configuration.live.check``, the file's rules); the store refuses
only what the table says: a taken name, a missing item or secret, the last live secret, a sixth.
"""

from __future__ import annotations

import secrets as random
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select, text
from sqlalchemy import update as sql_update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from webhooks.configuration.keys import Keyring, key_id_of
from webhooks.configuration.live import ENDPOINT, split
from webhooks.errors import WebhooksError
from webhooks.store.configuration.snapshot import TABLE as TABLE
from webhooks.store.configuration.snapshot import Snapshot as Snapshot  # the read every process keeps: there
from webhooks.store.configuration.snapshot import live as live
from webhooks.store.configuration.snapshot import opened as opened
from webhooks.store.configuration.snapshot import opened_table as opened_table
from webhooks.store.configuration.snapshot import readable, sealed
from webhooks.store.configuration.snapshot import snapshot as snapshot
from webhooks.tables.configuration import SIGNING, ConfigChange, ConfigItem, ConfigSecret, ConfigVersion
from webhooks.timestamps import aware
from webhooks.vocabulary import Reason

CHANNEL = "webhooks_config"  # PostgreSQL NOTIFY channel; the payload is the new version
MAX_LIVE = 5  # live signing secrets of one item at once
MAX_STORED = 20  # signing secrets of one item kept at all: past it, the longest-expired go first
PRUNE_AFTER = timedelta(days=30)  # an expired signing secret is deleted at the item's next write after this
VERSION = select(ConfigVersion.version).where(ConfigVersion.id == 1)
BATCH = "webhooks.config_batch"  # session.info key: inside ``batch``, changes wait for its commit


class ConfigItemError(WebhooksError):
    """A change the stored configuration refuses: ``word`` is the API's error, ``status`` its code."""

    def __init__(self, word: str, message: str, *, status: int = 409) -> None:
        super().__init__(message)
        self.word, self.status = word, status


def version(session: Session) -> int:
    return int(session.scalar(VERSION) or 0)


def items(session: Session, kind: str | None = None) -> list[ConfigItem]:
    """The stored items (of ``kind``), by name; a row the driver cannot read is left out (logged)."""
    query = select(ConfigItem).order_by(ConfigItem.name)
    query = query if kind is None else query.where(ConfigItem.kind == kind)
    return list(readable(session, query, ConfigItem.name, scalars=True)[0])


def item(session: Session, kind: str, name: str) -> ConfigItem | None:
    """The stored item ``name`` of ``kind`` (one primary-key read), or None."""
    found = session.get(ConfigItem, name)
    return found if found is not None and found.kind == kind else None


def secrets_of(session: Session, names: list[str] | None = None) -> dict[str, list[ConfigSecret]]:
    """Each item's secrets (oldest first), by item name."""
    query = select(ConfigSecret).order_by(ConfigSecret.created_at, ConfigSecret.id)
    if names is not None:
        query = query.where(ConfigSecret.item_name.in_(names))
    found: dict[str, list[ConfigSecret]] = {}
    for secret in readable(session, query, ConfigSecret.id, scalars=True)[0]:  # a row unreadable: left out (logged)
        found.setdefault(secret.item_name, []).append(secret)
    return found


def changes(session: Session, *, before: int | None = None, limit: int = 100) -> list[ConfigChange]:
    """The audit, newest first; ``before`` an id to page from."""
    query = select(ConfigChange).order_by(ConfigChange.id.desc()).limit(limit)
    return list(session.scalars(query if before is None else query.where(ConfigChange.id < before)))


def described(item: ConfigItem, secrets: list[ConfigSecret]) -> dict[str, Any]:
    """An item as the audit keeps it: its options, and its secrets as fingerprints."""
    return {
        "kind": item.kind,
        "name": item.name,
        "label": item.label,
        "provider": item.provider,
        "options": dict(item.options),
        "secrets": [
            {"id": s.id, "purpose": s.purpose, "fingerprint": s.fingerprint, "expires_at": _iso(s.expires_at)}
            for s in secrets
        ],
    }


def _changes_only(
    before: dict[str, Any] | None, after: dict[str, Any] | None
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """An audit record's two sides with the secrets both hold alike left out: a change to one
    secret records that one, not every secret of the item (150 secrets made one audit 3.4 MB)."""
    if before is None or after is None:
        return before, after
    old = {s["id"]: s for s in before.get("secrets", [])}
    new = {s["id"]: s for s in after.get("secrets", [])}
    same = {i for i in old if new.get(i) == old[i]}
    return (
        {**before, "secrets": [s for i, s in old.items() if i not in same]},
        {**after, "secrets": [s for i, s in new.items() if i not in same]},
    )


def _iso(at: datetime | None) -> str | None:
    return None if at is None else aware(at).isoformat()


def missing_key(session: Session, keyring: Keyring | None) -> str | None:
    """The first key id a stored secret is sealed under that ``keyring`` lacks (None: all open),
    read from each token's prefix, never opening one: start-up's fail-closed check."""
    known = set(keyring.key_ids) if keyring is not None else set()
    for token in session.scalars(select(ConfigSecret.ciphertext)):
        kid = key_id_of(token)
        if kid not in known:
            return kid
    return None


def lock(session: Session) -> None:
    """Hold configuration writes until this transaction ends: every admin write reads, validates
    and commits under it, so two writes never interleave (a PATCH naming a destination and the
    DELETE of it; two PATCHes of one item). PostgreSQL: the version row ``FOR UPDATE``; SQLite:
    its transactions begin ``IMMEDIATE`` (``webhooks.engines``), taking the database's write lock
    at this first statement."""
    session.execute(VERSION.with_for_update())


def destination_names(session: Session) -> set[str]:
    """The destinations the database holds, by name (what an endpoint's ``forward`` may name)."""
    return set(session.scalars(select(ConfigItem.name).where(ConfigItem.kind == "destination")))


def forwarding_to(session: Session, name: str) -> list[str]:
    """The stored endpoints whose ``forward`` names destination ``name``."""
    found = session.execute(select(ConfigItem.name, ConfigItem.options).where(ConfigItem.kind == ENDPOINT))
    return sorted(n for n, options in found if name in ((options or {}).get("forward") or ()))


def create(
    session: Session,
    keyring: Keyring | None,
    kind: str,
    name: str,
    table: Mapping[str, Any],
    *,
    label: str | None,
    who: str,
    now: datetime,
) -> ConfigItem:
    """Store a new item (its secrets sealed); ``exists`` when the name is taken."""
    options, signing, credentials = split(kind, table)
    _need_key(keyring, signing or credentials)
    if session.get(ConfigItem, name) is not None:
        raise ConfigItemError("exists", f"{name!r} exists")
    provider = str(options.pop("provider", name)) if kind == ENDPOINT else None
    item = ConfigItem(
        name=name, kind=kind, label=label, provider=provider, options=options, created_at=now, updated_at=now
    )
    session.add(item)
    try:
        session.flush()  # a concurrent create of the name fails here, on the primary key
    except IntegrityError:
        session.rollback()
        raise ConfigItemError("exists", f"{name!r} exists") from None
    sealed = [_seal(session, keyring, item, SIGNING, value, now) for value in signing]
    sealed += [_seal(session, keyring, item, purpose, value, now) for purpose, value in credentials.items()]
    _record(session, who, "create", item, None, described(item, sealed), now)
    _commit(session)
    return item


def update(
    session: Session,
    keyring: Keyring | None,
    name: str,
    table: Mapping[str, Any],
    *,
    label: str | None,
    who: str,
    now: datetime,
) -> ConfigItem:
    """Replace an item's options, label and credentials (not its signing secrets) with ``table``'s."""
    item = _item(session, name)
    stored = secrets_of(session, [name]).get(name, [])
    before = described(item, stored)
    options, _, credentials = split(item.kind, table)
    kept = {s.purpose: s for s in stored if s.purpose != SIGNING}
    held = {k: opened(keyring, item, s) for k, s in kept.items() if k in credentials}  # bound as it was
    changed = {k: v for k, v in credentials.items() if held.get(k) != v}
    _need_key(keyring, changed)
    for purpose, secret in kept.items():
        if purpose not in credentials or purpose in changed:
            session.delete(secret)
    if item.kind == ENDPOINT:
        item.provider = str(options.pop("provider", item.provider or name))
    item.options, item.label, item.updated_at = options, label, now
    fresh = [_seal(session, keyring, item, purpose, value, now) for purpose, value in changed.items()]
    for purpose, value in held.items():  # bound again to where the item now sends them (same id, same value)
        if purpose not in changed and keyring is not None:
            kept[purpose].ciphertext = sealed(keyring, item, kept[purpose].id, purpose, value.encode())
    after = [s for s in stored if s.purpose == SIGNING or (s.purpose in credentials and s.purpose not in changed)]
    _record(session, who, "update", item, before, described(item, after + fresh), now)
    _commit(session)
    return item


def remove(session: Session, name: str, *, who: str, now: datetime) -> None:
    """Delete an item and its secrets (its stored events stay)."""
    item = _item(session, name)
    before = described(item, secrets_of(session, [name]).get(name, []))
    session.execute(delete(ConfigSecret).where(ConfigSecret.item_name == name))
    session.delete(item)
    _record(session, who, "delete", item, before, None, now)
    _commit(session)


def add_secret(
    session: Session,
    keyring: Keyring | None,
    name: str,
    value: str,
    *,
    not_before: datetime | None = None,
    expires_at: datetime | None = None,
    who: str,
    now: datetime,
) -> ConfigSecret:
    """Add a signing secret; ``too_many_secrets`` when ``MAX_LIVE`` are live already."""
    _need_key(keyring, [value])
    item = _item(session, name)
    stored = _pruned(session, secrets_of(session, [name]).get(name, []), now, room=1)
    if sum(1 for s in stored if s.purpose == SIGNING and live(s, now)) >= MAX_LIVE:
        raise ConfigItemError("too_many_secrets", f"{name!r} has {MAX_LIVE} live secrets: expire one first")
    before = described(item, stored)
    secret = _seal(session, keyring, item, SIGNING, value, now, not_before=not_before, expires_at=expires_at)
    item.updated_at = now
    _record(session, who, "add_secret", item, before, described(item, [*stored, secret]), now)
    _commit(session)
    return secret


def expire_secret(
    session: Session, name: str, secret_id: str, *, at: datetime, who: str, now: datetime
) -> ConfigSecret:
    """Retire a signing secret at ``at``; ``last_secret`` when it is the item's last live one."""
    item = _item(session, name)
    stored = secrets_of(session, [name]).get(name, [])
    secret = next((s for s in stored if s.id == secret_id and s.purpose == SIGNING), None)
    if secret is None:
        raise ConfigItemError(Reason.NOT_FOUND, f"{name!r} has no secret {secret_id!r}", status=404)
    others = [s for s in stored if s is not secret and s.purpose == SIGNING and live(s, max(at, now))]
    if not others and live(secret, now):
        raise ConfigItemError("last_secret", f"{secret_id!r} is the last live secret of {name!r}: add another first")
    before = described(item, stored)
    secret.expires_at = at
    item.updated_at = now
    _record(session, who, "expire_secret", item, before, described(item, stored), now)
    _commit(session)
    return secret


def rotate(
    session: Session, keyring: Keyring | None, name: str, value: str, *, grace: float, who: str, now: datetime
) -> tuple[ConfigSecret, datetime]:
    """A new signing secret from now; every live one ends within ``grace`` seconds (one already
    ending sooner keeps its end). Returns the new secret and when the earlier ones end."""
    _need_key(keyring, [value])
    item = _item(session, name)
    stored = _pruned(session, secrets_of(session, [name]).get(name, []), now, room=1)
    ends = now + timedelta(seconds=grace)
    current = [s for s in stored if s.purpose == SIGNING and live(s, now)]
    if sum(1 for s in current if grace > 0) + 1 > MAX_LIVE:
        raise ConfigItemError("too_many_secrets", f"{name!r} has {MAX_LIVE} live secrets: expire one first")
    before = described(item, stored)
    for secret in current:
        if secret.expires_at is None or aware(secret.expires_at) > ends:
            secret.expires_at = ends
    fresh = _seal(session, keyring, item, SIGNING, value, now)
    item.updated_at = now
    _record(session, who, "rotate", item, before, described(item, [*stored, fresh]), now)
    _commit(session)
    return fresh, ends


def _pruned(session: Session, stored: list[ConfigSecret], now: datetime, *, room: int) -> list[ConfigSecret]:
    """``stored`` less the signing secrets deleted to bound them: every one expired more than
    ``PRUNE_AFTER`` ago, then the longest-expired until ``room`` more fit under ``MAX_STORED``;
    ``too_many_secrets`` when none that may go is left (the rest are live or still to start)."""
    signing = [s for s in stored if s.purpose == SIGNING]
    ended = sorted(
        (s for s in signing if s.expires_at is not None and aware(s.expires_at) <= now),
        key=lambda s: aware(s.expires_at or now),
    )
    gone = [s for s in ended if aware(s.expires_at or now) <= now - PRUNE_AFTER]
    over = len(signing) - len(gone) + room - MAX_STORED
    gone += [s for s in ended if s not in gone][: max(0, over)]
    if len(signing) - len(gone) + room > MAX_STORED:
        raise ConfigItemError("too_many_secrets", f"at most {MAX_STORED} secrets are kept per item: expire one first")
    for secret in gone:
        session.delete(secret)
    return [s for s in stored if s not in gone]


@contextmanager
def batch(session: Session) -> Iterator[None]:
    """The changes made inside are one transaction, committed at the end (``webhooks config
    apply``); an error rolls back every one."""
    session.info[BATCH] = True
    try:
        yield
        session.info.pop(BATCH)
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.info.pop(BATCH, None)


def _commit(session: Session) -> None:
    if not session.info.get(BATCH):
        session.commit()


def _item(session: Session, name: str) -> ConfigItem:
    item = session.get(ConfigItem, name)
    if item is None:
        raise ConfigItemError(Reason.NOT_FOUND, f"no item named {name!r} in the database", status=404)
    return item


def _need_key(keyring: Keyring | None, values: Any) -> None:
    if values and keyring is None:
        raise ConfigItemError(
            "no_encryption_key", "no encryption key is configured: set WEBHOOKS_ENCRYPTION_KEYS to store secrets"
        )


def _seal(
    session: Session,
    keyring: Keyring | None,
    item: ConfigItem,
    purpose: str,
    value: str,
    now: datetime,
    *,
    not_before: datetime | None = None,
    expires_at: datetime | None = None,
) -> ConfigSecret:
    assert keyring is not None  # _need_key said so first
    secret_id = "sec_" + random.token_hex(8)
    plain = value.encode()
    secret = ConfigSecret(
        id=secret_id,
        item_kind=item.kind,
        item_name=item.name,
        purpose=purpose,
        ciphertext=sealed(keyring, item, secret_id, purpose, plain),
        fingerprint=keyring.fingerprint(plain),
        not_before=not_before,
        expires_at=expires_at,
        created_at=now,
    )
    session.add(secret)
    return secret


def _record(
    session: Session,
    who: str,
    action: str,
    item: ConfigItem,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    now: datetime,
) -> None:
    """The audit row and the version bump of this change, in its transaction (and PostgreSQL's
    NOTIFY, which the server delivers at commit)."""
    target = f"{item.kind} {item.name}"
    before, after = _changes_only(before, after)
    session.add(ConfigChange(at=now, who=who, action=action, target=target, before=before, after=after))
    session.execute(sql_update(ConfigVersion).where(ConfigVersion.id == 1).values(version=ConfigVersion.version + 1))
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_notify(:channel, :payload)"), {"channel": CHANNEL, "payload": target})
