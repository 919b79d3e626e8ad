"""``webhooks keys status|rotate`` (#32): how many stored secrets each key id seals, and their
re-encryption under the keyring's first key.

Online: rows are read in keyset order (by id) ``BATCH`` at a time, each batch its own short
transaction, and a row is rewritten only if its token is still the one read (a row changed or
deleted meanwhile is left to the next run); no table lock, so deliveries, and the admin API's
changes, go on. A secret's value and fingerprint do not change, so no process needs to reload:
the version is not bumped; the audit gets one ``keys_rotated`` change.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import cast

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from webhooks.configuration.keys import Keyring, UndecryptableError, UnknownKeyError, key_id_of
from webhooks.store.configuration.items import missing_key
from webhooks.store.configuration.snapshot import opened, sealed
from webhooks.tables.configuration import ConfigChange, ConfigItem, ConfigSecret

BATCH = 100  # rows a transaction: short enough that no writer waits on it


def counts(session: Session) -> Counter[str]:
    """Stored secrets per key id (read from each token's prefix, never opening one)."""
    found = Counter(key_id_of(token) for token in session.scalars(select(ConfigSecret.ciphertext)))
    session.commit()
    return found


def rotate(session: Session, keyring: Keyring, *, who: str, now: datetime, batch: int = BATCH) -> tuple[int, int]:
    """Re-encrypt every secret not under the first key; (rotated, left: tokens that do not open).
    ``UnknownKeyError`` naming the key id, before any change, when a row's key is not configured."""
    before = counts(session)
    if kid := missing_key(session, keyring):
        session.rollback()
        raise UnknownKeyError(kid)
    rotated, left, after = 0, 0, ""
    while True:
        query = select(ConfigSecret.__table__).where(ConfigSecret.id > after).order_by(ConfigSecret.id).limit(batch)
        rows = cast(list[ConfigSecret], session.execute(query).all())  # rows, not ORM objects
        if not rows:
            session.commit()
            break
        owners = {s.item_name for s in rows}
        items = session.execute(select(ConfigItem.__table__).where(ConfigItem.name.in_(owners))).all()
        by_name = {i.name: cast(ConfigItem, i) for i in items}
        for secret in rows:
            secret_id, token, item = secret.id, secret.ciphertext, by_name.get(secret.item_name)
            if item is None or not keyring.needs_rotation(token):
                continue
            try:
                plain = opened(keyring, item, secret).encode()
            except UndecryptableError:
                left += 1
                continue
            fresh = sealed(keyring, item, secret_id, secret.purpose, plain)  # v2: bound to where it goes
            match = (ConfigSecret.id == secret_id) & (ConfigSecret.ciphertext == token)
            done = session.execute(update(ConfigSecret).where(match).values(ciphertext=fresh))
            rotated += getattr(done, "rowcount", 0)
        session.commit()
        after = rows[-1].id
    shown = {"rotated": rotated, "left": left, "counts": dict(counts(session))}
    audit = ConfigChange(
        at=now,
        who=who,
        action="keys_rotated",
        target=f"keyring {keyring.current_key_id}",
        before={"counts": dict(before)},
        after=shown,
    )
    session.add(audit)
    session.commit()
    return rotated, left
