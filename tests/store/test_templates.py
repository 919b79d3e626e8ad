"""The session's migrated templates (tests/support/templates.py) give a fresh database exactly what
``upgrade`` gives it: the same schema, triggers and rows, and the same journal mode on SQLite."""

from __future__ import annotations

import sqlite3
import subprocess
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.support import servers, templates
from tests.support.templates import migrated
from webhooks.service.cli import upgrade
from webhooks.tables import revisions


def no_upgrade(url: str, revision: str = "head") -> None:
    raise AssertionError(f"upgrade({url!r}) ran: the template was not copied")


def sqlite_dump(path: Path) -> tuple[str, list[str]]:
    conn = sqlite3.connect(path)
    try:
        # sorted: two runs of upgrade may create the same indexes in another order (batch operations)
        return conn.execute("PRAGMA journal_mode").fetchone()[0], sorted(conn.iterdump())
    finally:
        conn.close()


def test_a_fresh_sqlite_file_gets_what_upgrade_gives(
    tmp_path: Path, sqlite_template: templates.SqliteTemplate, monkeypatch: pytest.MonkeyPatch
) -> None:
    sqlite_template.build()
    upgrade(f"sqlite:///{tmp_path / 'upgraded.db'}")
    monkeypatch.setattr(templates, "upgrade", no_upgrade)
    migrated(f"sqlite:///{tmp_path / 'copied.db'}")
    assert [p.name for p in tmp_path.glob("copied.db*")] == ["copied.db"]  # no -wal or -shm needed
    mode, dump = sqlite_dump(tmp_path / "copied.db")
    assert (mode, dump) == sqlite_dump(tmp_path / "upgraded.db")
    assert mode == "wal"
    assert any("CREATE TRIGGER" in line for line in dump)  # the tombstone triggers are in the file


def test_a_sqlite_file_behind_the_head_is_upgraded_not_replaced(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(url, "0004")
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE kept (x INTEGER)"))
    migrated(url)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one() == revisions.head()
        assert conn.execute(sa.text("SELECT count(*) FROM kept")).scalar_one() == 0
    engine.dispose()


def pg_dump(url: str) -> list[str]:
    bin_dir = servers.postgres_bin()
    if bin_dir is None or not (bin_dir / "pg_dump").exists():
        pytest.skip("pg_dump is not installed")
    libpq = sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    out = subprocess.run([str(bin_dir / "pg_dump"), "--no-owner", libpq], capture_output=True, text=True, check=True)
    # \restrict and \unrestrict carry a random key per dump (pg_dump 17.6 and later)
    return [line for line in out.stdout.splitlines() if not line.startswith(("\\restrict", "\\unrestrict"))]


def test_a_fresh_postgres_database_gets_what_upgrade_gives(
    pg_url: str, pg_admin_url: str, pg_template: templates.PostgresTemplate, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = sa.create_engine(pg_admin_url, isolation_level="AUTOCOMMIT")
    name = f"wh_test_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        upgraded = admin.url.set(database=name).render_as_string(hide_password=False)
        upgrade(upgraded)
        pg_template.build()
        monkeypatch.setattr(templates, "upgrade", no_upgrade)
        migrated(pg_url)
        dump = pg_dump(pg_url)
        assert dump == pg_dump(upgraded)
        assert any("CREATE TRIGGER" in line for line in dump)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def test_a_postgres_database_behind_the_head_is_upgraded_not_replaced(pg_url: str) -> None:
    upgrade(pg_url, "0004")
    migrated(pg_url)
    engine = sa.create_engine(pg_url)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one() == revisions.head()
    engine.dispose()
