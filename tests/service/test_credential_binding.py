"""A stored credential is sealed bound to where it is sent (#37, finding 5): the AES-GCM associated
data of a ``v2`` token holds its purpose and its item's clear options that say which host receives
it (``webhooks.configuration.live.WHERE``), so an edit of those options in the database, with no key at
all, leaves the credential unopenable: every process refuses the item and says why, and the
credential never goes to the new host. ``v1`` tokens, written before (by ``eea6681``), still open
and are sealed again as ``v2`` by ``webhooks keys rotate`` or their item's next write."""

from __future__ import annotations

import base64
import json
import logging
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from tests.admin.test_runtime_config import api, rt
from tests.conftest import base_config, make_app
from tests.service.test_config_cli import session
from tests.service.test_keys_cli import keys
from tests.support.templates import migrated
from webhooks.configuration.keys import Keyring
from webhooks.store.configuration import items as store
from webhooks.tables.configuration import ConfigItem, ConfigSecret, ConfigVersion

OLD_KEY = "test-old:" + base64.b64encode(bytes(range(32))).decode()
RING = Keyring.parse(OLD_KEY)
# Sealed by eea6681's webhooks/configuration/keys.py (format v1: bound to the row only) under OLD_KEY, for the
# endpoint 'stripe-eu': its API key and its signing secret.
V1_API_KEY = (
    "sec_0123456789abcdef",
    "v1:test-old:-RpmHBe11ZPCF4Gs:XmLxqpLaj6_iv2_wwPu3opJaTHgTX3EyIxMnIT3G8KXBCIggvmrS",
)
V1_SIGNING = ("sec_fedcba9876543210", "v1:test-old:upKI9_aF4FStctW_:zSSmvO-Feg8SbxaTwX5A--yZKJxlB4l5VSuvWJyV-sjGZ-iJ8g")
API_KEY, SIGNING = "sk_test_eea6681_api_key", "whsec_eea6681_signing"
LOOPBACK = {"api_base": "http://127.0.0.1:9", "allow_private": True}  # what the file may say, for tests


def write_as_eea6681(url: str) -> None:
    """The rows eea6681's admin API wrote for a Stripe endpoint with an API key (its head is 0019, as today's)."""
    now = datetime.now(UTC)
    with session(url) as s:
        s.add(
            ConfigItem(name="stripe-eu", kind="endpoint", provider="stripe", options={}, created_at=now, updated_at=now)
        )
        for (secret_id, token), purpose, plain in ((V1_API_KEY, "api_key", API_KEY), (V1_SIGNING, "signing", SIGNING)):
            s.add(
                ConfigSecret(
                    id=secret_id,
                    item_kind="endpoint",
                    item_name="stripe-eu",
                    purpose=purpose,
                    ciphertext=token,
                    fingerprint=RING.fingerprint(plain.encode()),
                    created_at=now,
                )
            )
        s.execute(sa.update(ConfigVersion).where(ConfigVersion.id == 1).values(version=ConfigVersion.version + 1))
        s.commit()


def edit_options_in_the_database(url: str, name: str, **options: object) -> None:
    """What someone with the database and no key can do: change an item's clear options."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        held = conn.execute(sa.select(ConfigItem.options).where(ConfigItem.name == name)).scalar_one()
        held = json.loads(held) if isinstance(held, str) else dict(held)
        conn.execute(sa.update(ConfigItem).where(ConfigItem.name == name).values(options={**held, **options}))
        conn.execute(sa.update(ConfigVersion).where(ConfigVersion.id == 1).values(version=ConfigVersion.version + 1))
    engine.dispose()


def opened(url: str) -> tuple[dict[str, object], dict[str, str]]:
    with session(url) as s:
        snap = store.snapshot(s, RING, now=datetime.now(UTC))
    return {i.name: i.table for i in snap.items}, dict(snap.broken)


def tokens(url: str) -> set[str]:
    with session(url) as s:
        return {x.ciphertext.split(":")[0] for xs in store.secrets_of(s).values() for x in xs}


def upgrade_and_bind(url: str) -> None:
    migrated(url)
    write_as_eea6681(url)
    items, broken = opened(url)  # eea6681's tokens open as they are
    assert not broken and items["stripe-eu"]["api_key"] == API_KEY and items["stripe-eu"]["secrets"] == [SIGNING]
    rotated = keys(url, OLD_KEY, "rotate")  # the same key: only the format moves on
    assert rotated.exit_code == 0 and rotated.output == "re-encrypted 2 secrets under test-old\n", rotated.output
    assert tokens(url) == {"v2"}
    items, broken = opened(url)
    assert not broken and items["stripe-eu"]["api_key"] == API_KEY
    assert keys(url, OLD_KEY, "rotate").output == "re-encrypted 0 secrets under test-old\n"
    # Now bound: an edit of where the key goes, made in the database, leaves it unopenable.
    edit_options_in_the_database(url, "stripe-eu", **LOOPBACK)
    items, broken = opened(url)
    assert "stripe-eu" not in items and "set the credential again" in broken["stripe-eu"]


def test_a_database_written_by_eea6681_opens_and_is_bound_once_rotated(sqlite_url: str) -> None:
    upgrade_and_bind(sqlite_url)


@pytest.mark.slow
def test_a_database_written_by_eea6681_on_postgresql(pg_url: str) -> None:
    upgrade_and_bind(pg_url)


MAILGUN = {"provider": "mailgun", "secrets": ["key-mg-signing"], "api_key": "key-bound-1", "domain": "mg.example"}


def test_an_edit_of_where_a_credential_goes_outside_the_api_is_refused(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The attack: with the database and no key, point a stored API key at this machine (what the
    file's rules allow, for tests, so validation alone would build it). Every process refuses the
    item and says why; a running one keeps its last valid configuration. The admin API may move it
    between the kind's own hosts: the key is sealed again, bound to the new one."""
    keys_value = OLD_KEY
    app = make_app(base_config(sqlite_url, WEBHOOKS_ENCRYPTION_KEYS=keys_value))
    client = app.test_client()
    assert api(client, "POST", "/endpoints", {"name": "mg", **MAILGUN}).status_code == 201
    moved = api(client, "PATCH", "/endpoints/mg", {"api_base": "https://api.eu.mailgun.net"})
    assert moved.status_code == 200, moved.get_json()
    restarted = make_app(base_config(sqlite_url, WEBHOOKS_ENCRYPTION_KEYS=keys_value))
    endpoint = rt(restarted).settings.endpoints["mg"]
    assert (endpoint.options["api_base"], endpoint.options["api_key"]) == ("https://api.eu.mailgun.net", "key-bound-1")
    edit_options_in_the_database(sqlite_url, "mg", **LOOPBACK)
    with caplog.at_level(logging.ERROR, logger="webhooks"):
        rt(app).reload_config()
        again = make_app(base_config(sqlite_url, WEBHOOKS_ENCRYPTION_KEYS=keys_value))
    assert rt(app).settings.endpoints["mg"].options["api_base"] == "https://api.eu.mailgun.net"  # the last valid
    assert "mg" not in rt(again).settings.endpoints  # never built pointing at this machine
    said = [r.getMessage() for r in caplog.records if "mg" in r.getMessage() and "refused" in r.getMessage()]
    assert said and all("set the credential again" in m for m in said), said
    assert all("key-bound-1" not in r.getMessage() for r in caplog.records)
