"""The session's migrated templates (tests/support/templates.py) give a fresh database exactly what
``upgrade`` gives it: the same schema, triggers and rows, and the same journal mode on SQLite."""

from __future__ import annotations

import sqlite3
import subprocess
import uuid
from pathlib import Path
from typing import Any

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


def planner_view(url: str) -> list[Any]:
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT c.relname, c.relpages, c.reltuples, c.relallvisible, pg_relation_size(c.oid),"
                " (SELECT count(*) FROM pg_statistic s WHERE s.starelid = c.oid)"
                " FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace ORDER BY c.relname"
            )
        ).all()
    engine.dispose()
    return [tuple(row) for row in rows]


def _oid(admin: sa.Engine, name: str) -> int | None:
    with admin.connect() as conn:
        return conn.execute(sa.text("SELECT oid FROM pg_database WHERE datname = :n"), {"n": name}).scalar()


def test_a_database_a_test_wrote_to_comes_back_as_what_upgrade_gives(
    pg_url: str, pg_admin_url: str, pg_template: templates.PostgresTemplate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool (``give_back``, then ``fresh`` and ``recreate``) hands the next test the same database,
    renamed, with nothing a test wrote left in it: no row, no sequence past its start, no handler table."""
    from tests.conftest import base_config, drain, make_app, rows, stripe_event, stripe_headers

    name = pg_template.fresh()
    used = pg_template.admin.url.set(database=name).render_as_string(hide_password=False)
    templates.FRESH_PG[used] = pg_template
    app = make_app(base_config(used))
    client = app.test_client()
    for n in range(3):
        body = stripe_event(f"evt_{n}")
        assert client.post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200
    drain(app)
    with sa.create_engine(used, isolation_level="AUTOCOMMIT").connect() as conn:  # statistics of the rows written
        conn.execute(sa.text("VACUUM ANALYZE"))
    assert len(rows(app, "SELECT * FROM test_handler_calls")) == 3  # the handler wrote in its own table
    oid = _oid(pg_template.admin, name)
    kept = pg_template.give_back(name)  # the app's pooled sessions still open: give_back ends them
    assert kept is not None and kept != name and pg_template.idle["migrated"][-1] == kept
    with pytest.raises(sa.exc.OperationalError, match="does not exist"):  # what the test left can't reach it
        sa.create_engine(used, poolclass=sa.NullPool).connect()

    upgraded = pg_url  # a new database, upgraded the long way for comparison
    upgrade(upgraded)
    monkeypatch.setattr(templates, "upgrade", no_upgrade)
    again = pg_template.fresh()
    again_url = pg_template.admin.url.set(database=again).render_as_string(hide_password=False)
    templates.FRESH_PG[again_url] = pg_template
    migrated(again_url)
    assert _oid(pg_template.admin, again) == oid  # the very database the writes went to
    assert pg_dump(again_url) == pg_dump(upgraded)
    assert planner_view(again_url) == planner_view(upgraded)  # what a plan reads: files' sizes, figures, statistics
    pg_template.give_back(again)


def test_a_database_whose_schema_a_test_changed_is_dropped_not_reused(
    pg_url: str, pg_template: templates.PostgresTemplate
) -> None:
    migrated(pg_url)
    engine = sa.create_engine(pg_url, poolclass=sa.NullPool)
    with engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE events ADD COLUMN planted integer"))
    name = str(sa.make_url(pg_url).database)
    oid = _oid(pg_template.admin, name)
    assert pg_template.give_back(name) is None
    with pg_template.admin.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM pg_database WHERE oid = :o"), {"o": oid}).scalar() == 0


def test_an_empty_database_comes_back_empty(pg_url: str, pg_template: templates.PostgresTemplate) -> None:
    name = str(sa.make_url(pg_url).database)
    engine = sa.create_engine(pg_url, poolclass=sa.NullPool)
    with engine.begin() as conn:  # a table made and dropped again: the schema is an empty database's
        conn.execute(sa.text("CREATE TABLE passing (x integer)"))
        conn.execute(sa.text("DROP TABLE passing"))
    kept = pg_template.give_back(name)
    assert kept is not None and pg_template.idle["empty"][-1] == kept
    assert templates._empty_and_unused(pg_template._url(kept))
