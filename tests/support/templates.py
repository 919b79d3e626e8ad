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

import contextlib
import json
import shutil
import sqlite3
import time
import uuid
from collections.abc import Iterator
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


# What the planner reads of each relation's size besides the file itself.
STATS = (
    "SELECT relname, relpages, reltuples, relallvisible FROM pg_class"
    " WHERE relnamespace = 'public'::regnamespace ORDER BY relname"
)

# What a database holds, as text a test's writes do not change (rows, sequence values, statistics)
# and any other change does: every object in the public schema with its definition, extensions,
# the database's own settings and limits, and the migration it is at.
SIGNATURE = """
SELECT string_agg(x, E'\\n' ORDER BY x) FROM (
  SELECT 'rel ' || c.relname || ' ' || c.relkind::text || ' ' || c.relpersistence::text
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'
  UNION ALL
  SELECT 'col ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
         || ' ' || a.attnotnull || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
   WHERE n.nspname = 'public' AND a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT 'con ' || c.relname || ' ' || k.conname || ' ' || pg_get_constraintdef(k.oid)
    FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE n.nspname = 'public'
  UNION ALL
  SELECT 'idx ' || pg_get_indexdef(i.indexrelid)
    FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE n.nspname = 'public'
  UNION ALL
  SELECT 'trg ' || pg_get_triggerdef(t.oid) || ' ' || t.tgenabled::text FROM pg_trigger t WHERE NOT t.tgisinternal
  UNION ALL
  SELECT 'fn ' || p.oid::regprocedure::text || ' ' || md5(p.prosrc)
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
   WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
  UNION ALL
  SELECT 'nsp ' || nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%temp\\_%'  -- a session's temporary ones
  UNION ALL
  SELECT 'ext ' || extname || ' ' || extversion FROM pg_extension
  UNION ALL
  SELECT 'set ' || array_to_string(s.setconfig, ',') FROM pg_db_role_setting s
    JOIN pg_database d ON d.oid = s.setdatabase WHERE d.datname = current_database()
  UNION ALL
  SELECT 'db ' || datconnlimit || ' ' || datallowconn || ' ' || datistemplate
    FROM pg_database WHERE datname = current_database()
) objects(x)
"""


class PostgresTemplate:
    """A migrated database on the server ``admin_url`` names, built on first use, dropped by
    ``remove``; and this test process's pool of databases made from it.

    ``CREATE DATABASE`` copies a whole catalog (about 8 MB, every page written to the WAL): making
    an empty database for a test, replacing it by a copy of the template and dropping it afterwards
    cost 0.3–0.45 s of PostgreSQL's time per test, for about a thousand tests a run. So a database a
    test is done with is given back (``give_back``) and, when its schema is still exactly the
    template's or exactly an empty database's (``SIGNATURE``), made as new (``_as_new``: written
    tables truncated, the migrations' rows put back, the planner's figures and statistics the
    template's, sequences restarted) and kept for the next test: ``fresh`` hands out an empty one,
    ``recreate`` swaps an empty one for a migrated one by renaming both. A database a test changed
    otherwise is dropped. Nothing a test can see differs from a new database but the objects'
    identifiers (``tests/store/test_templates.py`` compares ``pg_dump``, relation sizes and planner
    figures of a reused database with an upgraded one's).
    """

    SCRATCH = ("test_handler_calls",)  # tests/sample_handlers.py's table, made by make_app each test

    def __init__(self, admin_url: str) -> None:
        self.admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
        self.name = f"wh_template_{uuid.uuid4().hex[:12]}"
        self.built = False
        self.signatures: dict[str, str] = {}  # "migrated", "empty" → SIGNATURE's text
        self.idle: dict[str, list[str]] = {"migrated": [], "empty": []}
        self.made: set[str] = set()  # every pooled database this process created (dropped by remove)
        self.seeds: dict[str, list[Any]] = {}  # the template's rows by table
        self.stats = "[]"  # the template's relations' size figures the planner reads (STATS), as JSON

    def _url(self, name: str) -> str:
        return self.admin.url.set(database=name).render_as_string(hide_password=False)

    @contextlib.contextmanager
    def _connect(self, name: str, begin: bool = False) -> Iterator[sa.Connection]:
        """A connection to the database ``name`` that leaves no pooled session behind."""
        engine = sa.create_engine(self._url(name), poolclass=sa.NullPool)
        try:
            with engine.begin() if begin else engine.connect() as conn:
                yield conn
        finally:
            engine.dispose()

    def build(self) -> None:
        if self.built:
            return
        with self.admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{self.name}"'))
        upgrade(self._url(self.name))
        with self._connect(self.name) as conn:
            self.signatures["migrated"] = _signature(conn)
            # the rows the migrations themselves write (config_version's one row), put back after each test
            self.seeds = {
                table: list(conn.execute(sa.text(f'SELECT * FROM "{table}"')).mappings()) for table in _tables(conn)
            }
            self.stats = json.dumps([dict(row) for row in conn.execute(sa.text(STATS)).mappings()])
        self.built = True  # upgrade disposed its engine and this connection is closed: no session holds the template

    def _create(self) -> str:
        name = f"wh_test_{uuid.uuid4().hex[:12]}"
        with self.admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        self.made.add(name)
        if "empty" not in self.signatures:
            with self._connect(name) as conn:
                self.signatures["empty"] = _signature(conn)
        return name

    def fresh(self) -> str:
        """The name of an empty database no session is on: a pooled one, else a new one."""
        return self.idle["empty"].pop() if self.idle["empty"] else self._create()

    def recreate(self, name: str) -> None:
        """Replace the empty database ``name`` by a copy of the template."""
        self.build()
        with self.admin.connect() as conn:
            if not self.idle["migrated"]:
                conn.execute(sa.text(f'DROP DATABASE "{name}"'))
                conn.execute(sa.text(f'CREATE DATABASE "{name}" TEMPLATE "{self.name}"'))
                return
            copy = self.idle["migrated"].pop()  # swap the names: the empty one goes back to the pool
            for old, new in ((name, f"{name}_swap"), (copy, name), (f"{name}_swap", copy)):
                conn.execute(sa.text(f'ALTER DATABASE "{old}" RENAME TO "{new}"'))
            self.idle["empty"].append(copy)

    def give_back(self, name: str) -> str | None:
        """After a test: end every session on ``name`` and rename it to a name no test has seen (a
        thread or process the test left behind that reconnects by the old name finds no database,
        as after a drop, and can never write into the next test's); then keep it for another test
        if its schema is the template's or an empty database's (made as new by ``_as_new``), else
        drop it. Returns the name it is kept under, or None. Giving back a name already given back
        does nothing."""
        if name not in self.made:
            return None
        self.made.discard(name)
        hidden = self._hide(name)
        if hidden is None:
            kind = None
        else:
            with self._connect(hidden, begin=True) as conn:
                for table in self.SCRATCH:
                    conn.execute(sa.text(f'DROP TABLE IF EXISTS "{table}"'))
                found = _signature(conn)
                kind = next((k for k, sig in self.signatures.items() if sig == found), None)
                if kind is not None:
                    _as_new(conn, self.seeds if kind == "migrated" else {}, self.stats)
        if hidden is not None and kind is not None:
            self.made.add(hidden)
            self.idle[kind].append(hidden)
            return hidden
        with self.admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{hidden or name}" WITH (FORCE)'))
        return None

    def _hide(self, name: str) -> str | None:
        """``name`` renamed to a new name once no session is on it, or None if sessions keep coming."""
        hidden = f"wh_test_{uuid.uuid4().hex[:12]}"
        with self.admin.connect() as conn:
            for _ in range(20):
                end_sessions(conn, name)
                try:
                    conn.execute(sa.text(f'ALTER DATABASE "{name}" RENAME TO "{hidden}"'))
                    return hidden
                except sa.exc.OperationalError:  # a session came back in between: end it again
                    continue
        return None

    def remove(self) -> None:
        with self.admin.connect() as conn:
            for name in [self.name, *self.made]:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        self.admin.dispose()


def _signature(conn: sa.Connection) -> str:
    """``SIGNATURE``'s text and the migration the database is at (``alembic_version``'s rows, or none)."""
    objects = str(conn.execute(sa.text(SIGNATURE)).scalar_one())
    if conn.execute(sa.text("SELECT to_regclass('public.alembic_version')")).scalar() is None:
        return objects + "\nversion none"
    rows = conn.execute(sa.text("SELECT version_num FROM alembic_version ORDER BY 1")).scalars()
    return objects + "\nversion " + ",".join(rows)


def _tables(conn: sa.Connection) -> list[str]:
    return list(
        conn.execute(
            sa.text("SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'alembic_version'")
        ).scalars()
    )


def _as_new(conn: sa.Connection, seeds: dict[str, list[Any]], stats: str) -> None:
    """Make the database what a new copy of the template is: the session acting as a replica (no
    trigger, no foreign key check), every table that holds a page truncated (its file, its indexes'
    and its visibility map new and empty, as a new database's are: a plan reads the same blocks),
    the rows the migrations wrote put back (``seeds``), the planner's figures (``STATS``) and
    statistics as the template's, and every sequence restarted where a new database's starts."""
    conn.execute(sa.text("SET LOCAL session_replication_role = replica"))
    written = conn.execute(
        sa.text(
            "SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace"
            " AND c.relkind = 'r' AND c.relname <> 'alembic_version' AND pg_relation_size(c.oid) > 0"
        )
    ).scalars()
    tables = ", ".join(f'"{table}"' for table in written)
    if tables:
        conn.execute(sa.text(f"TRUNCATE {tables} CASCADE"))
    for table, rows in seeds.items():
        for row in rows:
            columns = ", ".join(f'"{c}"' for c in row)
            values = ", ".join(f":{c}" for c in row)
            conn.execute(sa.text(f'INSERT INTO "{table}" ({columns}) VALUES ({values})'), dict(row))
    conn.execute(
        sa.text(
            "UPDATE pg_class c SET relpages = v.relpages, reltuples = v.reltuples, relallvisible = v.relallvisible"
            " FROM json_to_recordset(CAST(:stats AS json)) AS v(relname text, relpages int, reltuples real, relallvisible int)"
            " WHERE c.relnamespace = 'public'::regnamespace AND c.relname = v.relname"
        ),
        {"stats": stats},
    )
    conn.execute(
        sa.text(
            "DELETE FROM pg_statistic WHERE starelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'public'::regnamespace)"
        )
    )
    conn.execute(
        sa.text(
            "SELECT setval(format('%I.%I', schemaname, sequencename)::regclass, start_value, false)"
            " FROM pg_sequences WHERE schemaname = 'public'"
        )
    )


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
