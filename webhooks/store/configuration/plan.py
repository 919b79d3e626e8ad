"""``webhooks config plan|apply`` (#32): what a file's tables would change in the database's items,
and that change made in one transaction through ``config_items`` (each step audited).

The caller passes the tables resolved (no ``env:`` value left) and validated by the file's rules
(``webhooks.configuration.live.check``), and has refused the names the deployment's own file owns. A plan
shows secrets only as fingerprints: a stored one's, or the keyring's of a value still to store.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from webhooks.configuration.keys import Keyring
from webhooks.configuration.live import DESTINATION, ENDPOINT, split
from webhooks.store.configuration import items as store
from webhooks.store.configuration.items import ConfigItemError
from webhooks.tables.configuration import SIGNING, ConfigItem, ConfigSecret


@dataclass(frozen=True)
class Wanted:
    """One item as the file gives it: its kind, its table (values resolved) and its label."""

    kind: str
    table: Mapping[str, Any] = field(repr=False)
    label: str | None = None


@dataclass(frozen=True)
class Change:
    """One line of a plan. ``keys``: what an update changes; ``added``: values to seal (a
    credential by its option, a signing secret by ``SIGNING``); ``retired``: signing secrets' ids."""

    action: str  # create | update | delete
    kind: str
    name: str
    wanted: Wanted | None = None
    keys: tuple[str, ...] = ()
    added: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    retired: tuple[ConfigSecret, ...] = ()

    def line(self, keyring: Keyring | None) -> str:
        """``create endpoint shop-eu (secrets fp_…)``; never a secret's value."""
        head = f"{self.action} {self.kind} {self.name}"
        shown = [f"{p if p != SIGNING else 'secret'} +{_fingerprint(keyring, v)}" for p, v in self.added]
        shown += [f"secret -{s.fingerprint}" for s in self.retired]
        if self.action == "update":
            return f"{head}: {', '.join(self.keys)}" + (f" ({', '.join(shown)})" if shown else "")
        return head + (f" ({', '.join(shown)})" if shown else "")


def _fingerprint(keyring: Keyring | None, value: str) -> str:
    if keyring is None:
        raise ConfigItemError("no_encryption_key", "no encryption key is configured: set WEBHOOKS_ENCRYPTION_KEYS")
    return keyring.fingerprint(value.encode())


def _parts(kind: str, name: str, table: Mapping[str, Any]) -> tuple[dict[str, Any], list[str], dict[str, str]]:
    options, signing, credentials = split(kind, table)
    if kind == ENDPOINT:
        options["provider"] = str(options.get("provider", name))
    return options, signing, credentials


def plan(
    session: Session, keyring: Keyring | None, wanted: Mapping[str, Wanted], *, prune: bool, now: datetime
) -> list[Change]:
    """The changes, in the order ``apply`` makes them: deletions (endpoints first, so none forwards
    to a destination gone), then destinations, then endpoints (which may forward to them)."""
    stored = {item.name: item for item in store.items(session)}
    sealed = store.secrets_of(session)
    found: list[Change] = []
    if prune:
        gone = [item for name, item in stored.items() if name not in wanted]
        found += [Change("delete", i.kind, i.name) for i in sorted(gone, key=lambda i: (i.kind != ENDPOINT, i.name))]
    for kind in (DESTINATION, ENDPOINT):
        for name in sorted(n for n, w in wanted.items() if w.kind == kind):
            item = stored.get(name)
            if item is None:
                _, signing, credentials = _parts(kind, name, wanted[name].table)
                added = tuple((SIGNING, v) for v in signing) + tuple(sorted(credentials.items()))
                found.append(Change("create", kind, name, wanted[name], added=added))
            elif item.kind != kind:
                raise ConfigItemError(
                    "kind", f"{name!r} is a {item.kind} in the database: delete it before making it a {kind}"
                )
            elif change := _update(keyring, item, sealed.get(name, []), wanted[name], now):
                found.append(change)
    return found


def _update(
    keyring: Keyring | None, item: ConfigItem, secrets: list[ConfigSecret], wanted: Wanted, now: datetime
) -> Change | None:
    """The update that makes ``item`` what ``wanted`` says, or None when it already is."""
    options, signing, credentials = _parts(item.kind, item.name, wanted.table)
    current = {**item.options, **({"provider": item.provider} if item.kind == ENDPOINT else {})}
    keys = [k for k in sorted({*options, *current}) if options.get(k) != current.get(k)]
    held = {s.purpose: store.opened(keyring, item, s) for s in secrets if s.purpose != SIGNING}
    changed = sorted(k for k in {*credentials, *held} if credentials.get(k) != held.get(k))
    keys += [k for k in changed if k not in keys]
    live = [(s, store.opened(keyring, item, s)) for s in secrets if s.purpose == SIGNING and store.live(s, now)]
    added = tuple((SIGNING, v) for v in signing if v not in {value for _, value in live})
    retired = tuple(s for s, value in live if value not in signing)
    if added or retired:
        keys.append("secrets")
    if wanted.label != item.label:
        keys.append("label")
    if not keys:
        return None
    added += tuple((k, credentials[k]) for k in changed if k in credentials)
    return Change("update", item.kind, item.name, wanted, tuple(keys), added, retired)


def apply(session: Session, keyring: Keyring | None, changes: list[Change], *, who: str, now: datetime) -> None:
    """Make ``changes`` (from ``plan``) in one transaction: all of them, or none on an error."""
    with store.batch(session):
        for change in changes:
            if change.action == "delete":
                store.remove(session, change.name, who=who, now=now)
                continue
            assert change.wanted is not None  # a create or an update carries its table
            table, label = change.wanted.table, change.wanted.label
            if change.action == "create":
                store.create(session, keyring, change.kind, change.name, table, label=label, who=who, now=now)
                continue
            store.update(session, keyring, change.name, table, label=label, who=who, now=now)
            _swap_signing(session, keyring, change, who=who, now=now)


def _swap_signing(session: Session, keyring: Keyring | None, change: Change, *, who: str, now: datetime) -> None:
    """Retire and add signing secrets so the item is never without a live one, nor over the limit:
    every retired one but the last goes first, the new ones come, then the last retired goes."""
    retired = list(change.retired)
    last = retired.pop() if retired else None
    for secret in retired:
        store.expire_secret(session, change.name, secret.id, at=now, who=who, now=now)
    for purpose, value in change.added:
        if purpose == SIGNING:
            store.add_secret(session, keyring, change.name, value, who=who, now=now)
    if last is not None:
        store.expire_secret(session, change.name, last.id, at=now, who=who, now=now)
