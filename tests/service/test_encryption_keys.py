"""``WEBHOOKS_ENCRYPTION_KEYS`` (#32): read by ``webhooks.configuration.settings`` into ``Settings.keyring``; with no
variable, a SQLite database's key file (``<database file>.key``) when ``webhooks serve`` made one;
``WEBHOOKS_SECRET_*`` placeholders are not misspelt variables."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from webhooks.configuration import encryption
from webhooks.configuration.settings import load, unknown_variables
from webhooks.errors import ConfigError

KEY = base64.b64encode(b"k" * 32).decode()


def test_the_variable_is_parsed_into_a_keyring_the_first_key_sealing() -> None:
    settings = load({"WEBHOOKS_ENCRYPTION_KEYS": f"new:{KEY}, old:{base64.b64encode(b'o' * 32).decode()}"})
    assert settings.keyring is not None and settings.keyring.key_ids == ("new", "old")
    assert "new:" not in repr(settings) and KEY not in repr(settings)  # never in a log line


def test_a_malformed_value_stops_loading_without_echoing_the_key() -> None:
    with pytest.raises(ConfigError, match="WEBHOOKS_ENCRYPTION_KEYS: item 1") as caught:
        load({"WEBHOOKS_ENCRYPTION_KEYS": "k1:" + base64.b64encode(b"short").decode()})
    assert "c2hvcnQ" not in str(caught.value)


def test_no_variable_and_no_key_file_is_no_keyring(tmp_path: Path) -> None:
    assert load({"DATABASE_URL": f"sqlite:///{tmp_path}/w.db"}).keyring is None
    assert load({"DATABASE_URL": "postgresql://u@h/d"}).keyring is None


def test_serve_makes_the_key_file_once_and_every_command_finds_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/w.db"
    made = encryption.local_keyring(url)
    assert made is not None
    keyring, path, created = made
    assert created and path == tmp_path / "w.db.key" and os.stat(path).st_mode & 0o777 == 0o600
    again = encryption.local_keyring(url)
    assert again is not None and not again[2] and again[0].key_ids == keyring.key_ids
    loaded = load({"DATABASE_URL": url}).keyring  # a CLI command against the same database
    assert loaded is not None
    token = keyring.encrypt(b"s", table="t", owner="o", secret_id="1")
    assert loaded.decrypt(token, table="t", owner="o", secret_id="1") == b"s"


def test_the_variable_wins_over_the_key_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/w.db"
    encryption.local_keyring(url)
    keyring = load({"DATABASE_URL": url, "WEBHOOKS_ENCRYPTION_KEYS": f"env1:{KEY}"}).keyring
    assert keyring is not None and keyring.key_ids == ("env1",)


def test_no_key_file_beside_a_database_that_is_not_a_sqlite_file() -> None:
    assert encryption.key_file("postgresql+psycopg://u@h/d") is None
    assert encryption.key_file("sqlite://") is None
    assert encryption.local_keyring("sqlite:///:memory:") is None


def test_export_placeholders_are_not_misspelt_variables() -> None:
    env = {"WEBHOOKS_SECRET_SHOP_EU_1": "x", "WEBHOOKS_ENCRYPTION_KEYS": "", "WEBHOOKS_ENCRYPTON_KEYS": "x"}
    assert unknown_variables(env) == [
        "unknown environment variable WEBHOOKS_ENCRYPTON_KEYS is ignored (did you mean WEBHOOKS_ENCRYPTION_KEYS?)"
    ]
