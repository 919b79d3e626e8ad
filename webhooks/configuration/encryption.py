"""Which keyring a process seals and opens secrets with (#32): ``WEBHOOKS_ENCRYPTION_KEYS``'s when
it is set, else the key file ``webhooks serve`` keeps beside its SQLite database
(``<database file>.key``), which every other command run against that database finds; else none
(the admin API then refuses to store a secret: 409 ``no_encryption_key``).

``webhooks.configuration.settings`` passes the variable's value in; only ``webhooks serve`` creates the file.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import make_url

from webhooks.configuration.keys import Keyring, load_or_create_key_file


def key_file(database_url: str) -> Path | None:
    """``<database file>.key`` for a SQLite database kept in a file; None for any other."""
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    if url.database.startswith("file:"):  # a SQLite URI filename: no plain path to put a key beside
        return None
    database = Path(url.database)
    return database.with_name(database.name + ".key")


def keyring(value: str | None, database_url: str) -> Keyring | None:
    """The variable's keyring when it is set (not blank); else the database's key file's, when
    there is one (never created here); else None. ``ConfigError`` for a value or file that is wrong."""
    if value and value.strip():
        return Keyring.parse(value.strip())
    path = key_file(database_url)
    if path is None or not path.is_file():
        return None
    found, _ = load_or_create_key_file(path)  # exists: read and checked, not created
    return Keyring.parse(found, source=f"key file {path}")


def local_keyring(database_url: str) -> tuple[Keyring, Path, bool] | None:
    """``webhooks serve``'s keyring with no key configured: the database's key file, created
    (mode 0600) on the first start and reused after; with whether this call created it. None for
    a database that is not a SQLite file."""
    path = key_file(database_url)
    if path is None:
        return None
    value, created = load_or_create_key_file(path)
    return Keyring.parse(value, source=f"key file {path}"), path, created
