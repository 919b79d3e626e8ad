"""The test command touches nothing it did not make: with no ``TEST_*`` variables the suite runs on its
own throwaway PostgreSQL cluster and redis-server, leaves the machine's servers' data alone (Redis
database 15, a database named like the suite's), and stops its servers when it ends."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis
import sqlalchemy as sa

from tests.conftest import ROOT
from tests.support import servers

MACHINE_REDIS = "redis://127.0.0.1:6379/15"  # the old default: the suite emptied it
MACHINE_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"  # the old default: databases made as superuser
SUBSET = [
    "tests/service/test_safe_servers.py::test_with_no_test_variables_the_servers_are_throwaway_ones",
    "tests/receiver/test_hostile_values.py::test_ids_and_types_of_exactly_255_characters_are_stored_and_processed",  # any_app: 2
    "tests/receiver/test_ratelimit.py::test_two_app_instances_on_one_redis_share_one_budget",  # redis_url
    "tests/worker/test_handler_modules.py::test_service_refuses_a_handler_module_it_cannot_import",  # serve, worker: 2
]


def test_with_no_test_variables_the_servers_are_throwaway_ones(pg_url: str, redis_url: str) -> None:
    """Run by the test below in a child pytest; on its own it checks the same where nothing is named."""
    if os.environ.get("TEST_DATABASE_URL") or os.environ.get("TEST_REDIS_URL"):
        pytest.skip("a TEST_* variable names a server: the suite uses it")
    ports = {urlsplit(pg_url).port, urlsplit(redis_url).port}
    assert not ports & {5432, 6379}
    live = [s for s in servers.STARTED if isinstance(s, (servers.Postgres, servers.Redis))]
    assert {s.port for s in live} >= ports
    tmp = Path(tempfile.gettempdir()).resolve()
    assert all(s.dir is not None and s.dir.resolve().is_relative_to(tmp) for s in live)


def machine_redis() -> redis.Redis | None:
    client = redis.Redis.from_url(MACHINE_REDIS, socket_connect_timeout=2)
    try:
        client.ping()
        return client
    except redis.RedisError:
        return None


def machine_pg() -> sa.Engine | None:
    engine = sa.create_engine(MACHINE_PG, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3})
    try:
        engine.connect().close()
        return engine
    except sa.exc.OperationalError:
        engine.dispose()
        return None


@pytest.fixture
def scratch_tmp() -> Iterator[Path]:
    """A TMPDIR for the child run that the ``postgres`` user can enter (pytest's own is root's, 0700)."""
    path = Path(tempfile.mkdtemp(prefix="wh-safe-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def processes_in(directory: Path) -> list[str]:
    """Processes whose working directory is under ``directory`` (each server runs in its own dir)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if Path(os.readlink(proc / "cwd")).is_relative_to(directory):
                    command = (proc / "cmdline").read_bytes().replace(bytes(1), b" ").decode(errors="replace")
                    found.append(f"{proc.name}: {command}")
            except OSError:  # gone meanwhile, or not ours to read
                continue
    return found


@pytest.mark.slow
def test_the_test_command_leaves_the_machines_servers_alone_and_stops_its_own(scratch_tmp: Path) -> None:
    key, value = f"wh_test_marker_{uuid.uuid4().hex}", uuid.uuid4().hex
    database = f"wh_test_marker_{uuid.uuid4().hex[:12]}"
    rclient, pg = machine_redis(), machine_pg()
    if rclient is not None:
        rclient.set(key, value)
    if pg is not None:
        with pg.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{database}"'))
        marked = sa.create_engine(pg.url.set(database=database))
        with marked.begin() as conn:
            conn.execute(sa.text("CREATE TABLE marker (v text)"))
            conn.execute(sa.text("INSERT INTO marker VALUES (:v)"), {"v": value})
        marked.dispose()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TEST_")}
        env.update(TMPDIR=str(scratch_tmp), CI="true")  # CI=true: a missing server fails, never skips
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *SUBSET],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
        assert "6 passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-2000:]
        assert processes_in(scratch_tmp) == []
        assert not [p.name for p in scratch_tmp.iterdir() if p.name.startswith("wh-test-")]
        if rclient is not None:
            assert rclient.get(key) == value.encode(), "the machine's Redis database 15 was emptied"
        if pg is not None:
            marked = sa.create_engine(pg.url.set(database=database))
            with marked.connect() as conn:
                assert conn.execute(sa.text("SELECT v FROM marker")).scalar_one() == value
            marked.dispose()
    finally:
        if rclient is not None:
            rclient.delete(key)
            rclient.close()
        if pg is not None:
            with pg.connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
            pg.dispose()
