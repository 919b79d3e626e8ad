"""Fixtures of the fault-injection suite: throwaway Redis and PostgreSQL, gunicorn and workers."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.conftest import ADMIN_PASSWORD, ADYEN_KEY, STRIPE_SECRET, free_port
from tests.faults import effects
from tests.faults.services import Postgres, Redis
from tests.support.processes import BIN, clean_env, gunicorn_cmd, wait_http
from webhooks.service.cli import upgrade


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    pg = Postgres()
    pg.start()
    yield pg
    pg.remove()


@pytest.fixture
def redis_server() -> Iterator[Redis]:
    server = Redis()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def database(postgres: Postgres) -> Iterator[str]:
    """A fresh database in the throwaway cluster, migrated, with the fault handlers' table."""
    name = f"faults_{free_port()}"
    admin = sa.create_engine(postgres.url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = postgres.url.rsplit("/", 1)[0] + "/" + name
    upgrade(url)
    engine = sa.create_engine(url)
    effects.metadata.create_all(engine)
    engine.dispose()
    yield url
    with contextlib.suppress(sa.exc.OperationalError), admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def service_env(database_url: str, redis_url: str, **extra: str) -> dict[str, str]:
    return clean_env(
        DATABASE_URL=database_url,
        REDIS_URL=redis_url,
        WEBHOOKS_ADMIN_PASSWORD=ADMIN_PASSWORD,
        WEBHOOKS_HANDLERS="tests.faults.handlers",
        STRIPE_WEBHOOK_SECRET=STRIPE_SECRET,
        ADYEN_HMAC_KEY=ADYEN_KEY,
        WEBHOOKS_SWEEP_INTERVAL="1",
        WEBHOOKS_SWEEP_AGE="3",
        # A killed worker's row is the sweeper's once its lease (job timeout + 30 s) is over.
        WEBHOOKS_JOB_TIMEOUT="10",
        WEBHOOKS_RETRY_BASE_SECONDS="1",
        WEBHOOKS_RETRY_MAX_SECONDS="4",
        WEBHOOKS_LOG_LEVEL="WARNING",
        **extra,
    )


class Proc:
    """A child process whose output is kept (for the failure message) and which is stopped by pid."""

    def __init__(self, cmd: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self.file = log.open("ab")
        self.popen = subprocess.Popen(
            cmd, env=env, stdout=self.file, stderr=subprocess.STDOUT, cwd=Path(__file__).resolve().parents[2]
        )

    def signal(self, sig: int) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)

    def stop(self, timeout: float = 20) -> int:
        self.signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            return self.popen.wait()
        finally:
            self.file.close()

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def processes() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    try:
        yield started
    finally:
        for proc in started:
            proc.stop()


def gunicorn(env: dict[str, str], tmp: Path, workers: int = 2, threads: int = 8) -> tuple[Proc, str]:
    port = free_port()
    cmd = gunicorn_cmd(port, "--workers", str(workers), "--threads", str(threads), "--no-control-socket")
    proc = Proc(cmd, env, tmp / f"gunicorn-{port}.log")
    base = f"http://127.0.0.1:{port}"
    wait_http(base + "/")
    return proc, base


def worker(env: dict[str, str], tmp: Path, name: str) -> Proc:
    return Proc([str(BIN / "webhooks"), "worker"], env, tmp / f"worker-{name}.log")
