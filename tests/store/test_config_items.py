"""``webhooks.store.configuration.items`` (#32) on both databases: each change is one transaction with
its audit row and a version bump; secrets are sealed (fingerprints in the audit, never values);
the store refuses a taken name, the last live secret and a sixth live one; a snapshot opens the
live secrets and fails closed, naming the key id, on a key not configured."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from tests.support.templates import migrated
from webhooks.configuration.keys import Keyring, UnknownKeyError
from webhooks.store.configuration import items as store
from webhooks.store.configuration.items import ConfigItemError
from webhooks.tables.configuration import ConfigSecret

NOW = datetime(2026, 12, 1, tzinfo=UTC)
KEYRING = Keyring([("k1", b"1" * 32)])
SECRET = "whsec_" + base64.b64encode(b"s" * 24).decode()
OTHER = "whsec_" + base64.b64encode(b"o" * 24).decode()


@pytest.fixture(params=["sqlite_url", "pg_url"])
def session(request: pytest.FixtureRequest) -> Session:
    url = request.getfixturevalue(request.param)
    migrated(url)
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    request.addfinalizer(engine.dispose)
    found = Session(engine)
    request.addfinalizer(found.close)
    return found


def endpoint(session: Session, name: str = "shop-eu", **table: object) -> None:
    body = {"provider": "standard", "secrets": [SECRET], "api_key": "key-123", **table}
    store.create(session, KEYRING, "endpoint", name, body, label="merchant-7", who="ops", now=NOW)


def test_create_seals_secrets_bumps_the_version_and_audits_fingerprints(session: Session) -> None:
    endpoint(session)
    assert store.version(session) == 1
    [item] = store.items(session)
    assert (item.kind, item.provider, item.label, item.options) == ("endpoint", "standard", "merchant-7", {})
    sealed = store.secrets_of(session)["shop-eu"]
    assert sorted(s.purpose for s in sealed) == ["api_key", "signing"]
    assert all(SECRET not in s.ciphertext and "key-123" not in s.ciphertext for s in sealed)
    [change] = store.changes(session)
    assert (change.who, change.action, change.target, change.before) == ("ops", "create", "endpoint shop-eu", None)
    assert change.after is not None
    assert {s["fingerprint"] for s in change.after["secrets"]} == {s.fingerprint for s in sealed}
    assert SECRET not in repr(change.after) and "key-123" not in repr(change.after)


def test_a_taken_name_is_exists_and_changes_nothing(session: Session) -> None:
    endpoint(session)
    with pytest.raises(ConfigItemError) as caught:
        store.create(session, KEYRING, "destination", "shop-eu", {"url": "https://x"}, label=None, who="o", now=NOW)
    assert (caught.value.word, caught.value.status) == ("exists", 409)
    session.rollback()
    assert store.version(session) == 1 and len(store.changes(session)) == 1


def test_no_key_refuses_to_store_a_secret(session: Session) -> None:
    with pytest.raises(ConfigItemError) as caught:
        store.create(session, None, "endpoint", "e", {"secrets": [SECRET]}, label=None, who="o", now=NOW)
    assert caught.value.word == "no_encryption_key" and "WEBHOOKS_ENCRYPTION_KEYS" in str(caught.value)


def test_snapshot_opens_live_secrets_and_says_when_to_look_again(session: Session) -> None:
    endpoint(session)
    later = NOW + timedelta(hours=1)
    store.add_secret(session, KEYRING, "shop-eu", OTHER, expires_at=later, who="ops", now=NOW)
    snap = store.snapshot(session, KEYRING, now=NOW)
    [item] = snap.items
    assert (snap.version, item.table["secrets"], item.table["api_key"]) == (2, [SECRET, OTHER], "key-123")
    assert snap.next_change == later
    assert store.snapshot(session, KEYRING, now=later).items[0].table["secrets"] == [SECRET]


def test_a_key_not_configured_fails_closed_naming_it(session: Session) -> None:
    endpoint(session)
    with pytest.raises(UnknownKeyError, match="'k1'"):
        store.snapshot(session, Keyring([("k2", b"2" * 32)]), now=NOW)
    with pytest.raises(UnknownKeyError, match="'k1'"):
        store.snapshot(session, None, now=NOW)


def test_a_token_copied_to_another_row_is_broken_not_fatal(session: Session) -> None:
    endpoint(session)
    endpoint(session, "shop-us")
    sealed = store.secrets_of(session)
    donor = next(s for s in sealed["shop-eu"] if s.purpose == "signing")
    session.execute(
        sa.update(ConfigSecret)
        .where(ConfigSecret.item_name == "shop-us", ConfigSecret.purpose == "signing")
        .values(ciphertext=donor.ciphertext)
    )
    session.commit()
    snap = store.snapshot(session, KEYRING, now=NOW)
    assert [i.name for i in snap.items] == ["shop-eu"] and [b[0] for b in snap.broken] == ["shop-us"]


def test_the_last_live_secret_cannot_be_expired(session: Session) -> None:
    endpoint(session)
    [first] = [s for s in store.secrets_of(session)["shop-eu"] if s.purpose == "signing"]
    with pytest.raises(ConfigItemError) as caught:
        store.expire_secret(session, "shop-eu", first.id, at=NOW, who="ops", now=NOW)
    assert caught.value.word == "last_secret"
    session.rollback()
    store.add_secret(session, KEYRING, "shop-eu", OTHER, who="ops", now=NOW)
    store.expire_secret(session, "shop-eu", first.id, at=NOW, who="ops", now=NOW)
    assert store.snapshot(session, KEYRING, now=NOW).items[0].table["secrets"] == [OTHER]


def test_a_sixth_live_secret_is_too_many(session: Session) -> None:
    endpoint(session)
    for n in range(4):
        store.add_secret(session, KEYRING, "shop-eu", f"{OTHER}{n}", who="ops", now=NOW)
    with pytest.raises(ConfigItemError) as caught:
        store.add_secret(session, KEYRING, "shop-eu", OTHER, who="ops", now=NOW)
    assert caught.value.word == "too_many_secrets"


def test_rotate_keeps_earlier_secrets_through_the_grace(session: Session) -> None:
    store.create(
        session, KEYRING, "destination", "orders", {"url": "https://h.example/in?token=t0k3n", "secrets": [SECRET]},
        label=None, who="ops", now=NOW,
    )  # fmt: skip
    [item] = store.items(session)
    assert item.options == {"url": "https://h.example/in?***"}  # the query is sealed, not kept in clear
    fresh, ends = store.rotate(session, KEYRING, "orders", OTHER, grace=60, who="ops", now=NOW)
    assert ends == NOW + timedelta(seconds=60) and fresh.expires_at is None
    table = store.snapshot(session, KEYRING, now=NOW).items[0].table
    assert (table["secrets"], table["url"]) == ([OTHER, SECRET], "https://h.example/in?token=t0k3n")
    assert store.snapshot(session, KEYRING, now=ends).items[0].table["secrets"] == [OTHER]


def test_update_replaces_credentials_and_delete_removes_the_secrets(session: Session) -> None:
    endpoint(session)
    store.update(
        session, KEYRING, "shop-eu", {"provider": "standard", "api_key": "key-456"}, label="m8", who="o", now=NOW
    )
    table = store.snapshot(session, KEYRING, now=NOW).items[0].table
    assert (table["api_key"], table["secrets"]) == ("key-456", [SECRET])
    store.remove(session, "shop-eu", who="o", now=NOW)
    assert store.items(session) == [] and store.secrets_of(session) == {} and store.version(session) == 3
    assert [c.action for c in store.changes(session)] == ["delete", "update", "create"]
    with pytest.raises(ConfigItemError) as caught:
        store.remove(session, "shop-eu", who="o", now=NOW)
    assert (caught.value.word, caught.value.status) == ("not_found", 404)
