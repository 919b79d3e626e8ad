"""Throwaway servers for tests and benchmarks: a PostgreSQL cluster and redis-servers in temporary
directories on free ports, children of this process (they die with it), stopped by process id.

The machine's own servers are never touched. PostgreSQL refuses to run as root, so where this runs
as root the cluster runs as the ``postgres`` user. Nothing here imports pytest: a caller turns
``Unavailable`` into a skip or a failure (tests) or an error message (benchmarks).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pwd
import re
import shutil
import signal
import socket
import socketserver
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PR_SET_PDEATHSIG = 1
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the forked child only calls it
STARTED: list[Redis | Postgres] = []  # every server of this process whose directory is not removed yet


class Unavailable(RuntimeError):
    """A server's binaries are not installed (or do not start)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


STABLE_PORTS = (20000, 32000)  # below Linux's ephemeral range (32768-60999 here)


def stable_port() -> int:
    """A free port outside the ephemeral range, for a server that is killed and started again on
    it: while it is down, a client retrying a connection to an ephemeral port can be handed that
    very port as its own (TCP's self-connect), and the restarted server cannot listen (a
    RabbitMQ node restarted under CI's load failed so: ``listener_sup_127.0.0.1:<port>``)."""
    import random

    for _ in range(200):
        port = random.randint(*STABLE_PORTS)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    return free_port()


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise Unavailable(f"{what} did not answer within {timeout} s")
        time.sleep(0.05)


def _dies_with_parent(sig: int) -> Callable[[], None]:
    """A ``preexec_fn``: the kernel sends ``sig`` to the child when this process dies, even by SIGKILL
    (it runs after Popen's ``user=`` switch, which would otherwise clear the setting)."""

    def arm() -> None:
        _PRCTL(PR_SET_PDEATHSIG, sig)

    return arm


def _stop(proc: subprocess.Popen[bytes] | None, sig: int, timeout: float = 30) -> None:
    """Signal our child by its pid and reap it (a zombie would look alive); SIGKILL after ``timeout``."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def postgres_bin() -> Path | None:
    """The newest ``/usr/lib/postgresql/N/bin`` (Debian's layout), else where ``initdb`` is on PATH."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: [int(n) for n in re.findall(r"\d+", p.parent.parent.name)] or [0],
    )
    if found:
        return found[-1].parent
    on_path = shutil.which("initdb")
    return Path(on_path).resolve().parent if on_path else None


class Redis:
    """A redis-server without persistence on a free port: a restart loses everything, like a flush."""

    def __init__(self, port: int | None = None) -> None:
        if not shutil.which("redis-server"):
            raise Unavailable("redis-server is not installed (Debian: apt-get install redis-server)")
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.dir: Path | None = None  # made by start, removed by stop: nothing in it outlives a run
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        import redis

        self.dir = Path(tempfile.mkdtemp(prefix="wh-test-redis-"))
        if self not in STARTED:  # from its directory on: a run stopped now still removes it
            STARTED.append(self)
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
            ],
            cwd=self.dir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_dies_with_parent(signal.SIGTERM),
        )
        client = redis.Redis(port=self.port)

        def pings() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise Unavailable(f"redis-server exited with {self.proc.returncode}")
            try:
                return bool(client.ping())
            except redis.RedisError:
                return False

        _wait(pings, 30, "redis-server")

    def stop(self) -> None:
        _stop(self.proc, signal.SIGTERM)
        if self in STARTED:
            STARTED.remove(self)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def remove(self) -> None:
        self.stop()


class Postgres:
    """A PostgreSQL cluster in a temporary directory on a free port (trust auth, user ``postgres``)."""

    def __init__(self) -> None:
        bin_dir = postgres_bin()
        if bin_dir is None or not (bin_dir / "postgres").exists():
            raise Unavailable("PostgreSQL server binaries are not installed (Debian: apt-get install postgresql)")
        self.bin = bin_dir
        self.user: dict[str, Any] = {}
        self.dir = Path(tempfile.mkdtemp(prefix="wh-test-pg-"))
        self.proc: subprocess.Popen[bytes] | None = None
        STARTED.append(self)  # from its directory on: a run stopped during initdb still removes it
        if os.geteuid() == 0:  # PostgreSQL refuses root: the cluster is the postgres user's
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                self.remove()
                raise Unavailable("running as root and there is no postgres user to run PostgreSQL") from None
            shutil.chown(self.dir, "postgres", "postgres")
            self.user = {"user": "postgres", "group": "postgres", "extra_groups": []}
        self.data = self.dir / "data"
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        done = subprocess.run(
            [
                str(self.bin / "initdb"),
                "-D",
                str(self.data),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
                "-E",
                "UTF8",
            ],
            capture_output=True,
            timeout=180,
            cwd=self.dir,
            **self.user,
        )
        if done.returncode:
            self.remove()
            raise Unavailable(f"initdb failed: {done.stderr.decode(errors='replace').strip()[-500:]}")

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def start(self) -> None:
        import psycopg

        log = (self.dir / "log").open("ab")
        self.proc = subprocess.Popen(
            [
                str(self.bin / "postgres"),
                "-D",
                str(self.data),
                "-p",
                str(self.port),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                f"unix_socket_directories={self.dir}",
                "-c",
                "fsync=off",
                "-c",
                "max_connections=200",
            ],
            cwd=self.dir,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_dies_with_parent(signal.SIGINT),
            **self.user,
        )
        log.close()

        def accepts() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                tail = (self.dir / "log").read_text(errors="replace")[-500:]
                raise Unavailable(f"postgres exited with {self.proc.returncode}: {tail}")
            try:
                psycopg.connect(
                    host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", connect_timeout=5
                ).close()
                return True
            except psycopg.OperationalError:
                return False

        _wait(accepts, 60, "PostgreSQL")

    def stop(self) -> None:
        """Fast shutdown (SIGINT to the postmaster): sessions are cut, as in a failover."""
        _stop(self.proc, signal.SIGINT)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        if self in STARTED:
            STARTED.remove(self)


def stop_all() -> None:
    """Stop and remove every server still running (an ``atexit`` hook: a session cut short leaves none)."""
    for server in list(reversed(STARTED)):
        with contextlib.suppress(Exception):
            server.remove()


STOP_POLL = 0.05  # seconds: how often a test's server thread looks at its stop flag


def serve_in_thread(server: socketserver.BaseServer, name: str | None = None) -> threading.Thread:
    """``server.serve_forever`` on a started daemon thread that looks at its stop flag every
    ``STOP_POLL`` seconds: with socketserver's default (0.5 s) each ``shutdown()`` at a test's end
    waited up to half a second, hundreds of times a run."""
    thread = threading.Thread(target=server.serve_forever, args=(STOP_POLL,), name=name, daemon=True)
    thread.start()
    return thread
