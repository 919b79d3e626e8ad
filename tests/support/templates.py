"""One migrated database per test session, copied for each test instead of migrating it again.

Running every Alembic revision on a fresh SQLite file costs 0.4–0.9 s on a loaded 2-core machine;
copying a migrated file costs about 1 ms. So the session builds each template once, from the head,
with ``upgrade`` itself, and ``migrated(url)`` gives a fresh database exactly what ``upgrade`` would:

- SQLite: a byte copy of the template file, taken after a checkpoint (no ``-wal``/``-shm`` file
  is needed; the file keeps its WAL mode, its triggers and its ``alembic_version``);
- PostgreSQL: ``CREATE DATABASE … TEMPLATE`` from a migrated database on the same server, which
  copies everything in it (tables, indexes, triggers, functions, ``alembic_version``).

Anything else (a database at an older revision, one a test already wrote to, a URL the session
did not make) goes through ``upgrade``: tests of the migrations themselves still run every
revision from empty.
"""

from __future__ import annotations

import shutil
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from webhooks.service.cli import upgrade


class SqliteTemplate:
    """A migrated SQLite file in ``directory``, built on first use."""

    def __init__(self, directory: Path) -> None:
        self.file = directory / "template.db"
        self.built = False

    def build(self) -> None:
        if self.built:
            return
        upgrade(f"sqlite:///{self.file}")
        conn = sqlite3.connect(self.file)
        try:  # the -wal file's pages into the main file: the copy needs no -wal or -shm
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
        for suffix in ("-wal", "-shm"):
            Path(f"{self.file}{suffix}").unlink(missing_ok=True)
        self.built = True

    def copy_to(self, target: Path) -> None:
        self.build()
        shutil.copyfile(self.file, target)


class PostgresTemplate:
    """A migrated database on the server ``admin_url`` names, built on first use, dropped by ``remove``."""

    def __init__(self, admin_url: str) -> None:
        self.admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
        self.name = f"wh_template_{uuid.uuid4().hex[:12]}"
        self.built = False

    def build(self) -> None:
        if self.built:
            return
        with self.admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{self.name}"'))
        upgrade(self.admin.url.set(database=self.name).render_as_string(hide_password=False))
        self.built = True  # upgrade disposed its engine: no session holds the template open

    def recreate(self, name: str) -> None:
        """Replace the empty database ``name`` by a copy of the template."""
        self.build()
        with self.admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE "{name}"'))
            conn.execute(sa.text(f'CREATE DATABASE "{name}" TEMPLATE "{self.name}"'))

    def remove(self) -> None:
        with self.admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)'))
        self.admin.dispose()


def end_sessions(conn: sa.Connection, name: str, timeout: float = 10.0) -> None:
    """End every other session on the database ``name`` and wait, polling every 5 ms, until they are
    gone. ``DROP DATABASE … WITH (FORCE)`` ends them too, but then sleeps in steps of 100 ms until
    they have exited: a test's app left its pooled connections open, so nearly every PostgreSQL
    test's end paid at least that."""
    others = "FROM pg_stat_activity WHERE datname = :name AND pid <> pg_backend_pid()"
    conn.execute(sa.text(f"SELECT pg_terminate_backend(pid) {others}"), {"name": name})
    deadline = time.monotonic() + timeout
    while (
        conn.execute(sa.text(f"SELECT count(*) {others}"), {"name": name}).scalar_one() and time.monotonic() < deadline
    ):
        time.sleep(0.005)


SQLITE: list[SqliteTemplate] = []  # this session's, set by the session fixture in tests/conftest.py
FRESH_PG: dict[str, PostgresTemplate] = {}  # databases pg_url made and nobody migrated yet


def _empty_and_unused(url: str) -> bool:
    """No table, sequence or view in the database, and no other session on it."""
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            relations = conn.execute(
                sa.text(
                    "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                    " WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')"
                )
            ).scalar_one()
            others = conn.execute(
                sa.text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            ).scalar_one()
    finally:
        engine.dispose()
    return relations == 0 and others == 0


def _fresh_file(database: str | None, query: Any) -> bool:
    """A plain SQLite file that does not exist yet or is empty, with no journal beside it."""
    if not database or database == ":memory:" or query:
        return False
    path = Path(database)
    if path.exists() and path.stat().st_size:
        return False
    return not any(Path(f"{path}{suffix}").exists() for suffix in ("-wal", "-shm", "-journal"))


def migrated(url: str) -> None:
    """What ``webhooks.service.cli.upgrade(url)`` does, by copying this session's template when ``url`` is
    a fresh, empty database (a SQLite file that does not exist yet or is empty, or a database
    ``pg_url`` made that nobody touched); else ``upgrade(url)`` itself."""
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite" and SQLITE and _fresh_file(parsed.database, parsed.query):
        SQLITE[-1].copy_to(Path(str(parsed.database)))
        return
    template = FRESH_PG.pop(url, None)
    if template is not None and _empty_and_unused(url):
        template.recreate(str(parsed.database))
        return
    upgrade(url)
