"""Throwaway services for fault injection: our own redis-server and PostgreSQL cluster on spare
ports, stopped and started by process id. The machine's shared services are never touched."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import free_port, wait_until

PG_BIN = Path("/usr/lib/postgresql/15/bin")


def missing(what: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} is not available — required under CI=true")
    pytest.skip(f"{what} is not available")


def _stop_pid(pid: int, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)


class Redis:
    """A redis-server without persistence: a restart loses everything, like a flush."""

    def __init__(self) -> None:
        if not shutil.which("redis-server"):
            missing("redis-server")
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        import redis

        client = redis.Redis(port=self.port)
        wait_until(lambda: _pings(client), timeout=15)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # our child: signal its pid, reap it (a zombie would look alive)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _pings(client: object) -> bool:
    import redis

    try:
        return bool(client.ping())  # type: ignore[attr-defined]
    except redis.RedisError:
        return False


class Postgres:
    """A PostgreSQL cluster in a temp directory, run as the ``postgres`` OS user on a spare port."""

    def __init__(self) -> None:
        if not (PG_BIN / "initdb").exists() or not shutil.which("runuser"):
            missing("PostgreSQL 15 binaries")
        self.dir = Path(tempfile.mkdtemp(prefix="wh-faults-pg-"))
        shutil.chown(self.dir, "postgres", "postgres")
        self.data = self.dir / "data"
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        self._as_postgres([str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
                           "--no-sync", "-E", "UTF8"])

    def _as_postgres(self, cmd: list[str]) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *cmd], check=True, capture_output=True, timeout=120)

    @property
    def pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def start(self) -> None:
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.dir} "
                   "-c fsync=off -c max_connections=200")
        self._as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "log"),
                           "-o", options, "-w", "start"])

    def stop(self) -> None:
        """Fast shutdown (SIGINT to the postmaster): sessions are cut, as in a failover."""
        pid = self.pid
        if pid is not None:
            _stop_pid(pid, signal.SIGINT)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
