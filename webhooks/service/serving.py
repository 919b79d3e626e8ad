"""``webhooks serve``: web processes and one worker process on one SQLite file, one command.

gunicorn's master starts ``WEB_CONCURRENCY`` web processes (the Procfile's web settings) and,
once it listens, the worker process (``webhooks serve-worker``), which it starts again if it dies
and stops when it stops. Ingest and processing no longer share one GIL, and the web processes
share no memory: they queue nothing (``JobQueue.hand_over``) and the worker process takes the
committed ``queued`` rows from the database onto its own embedded queue (``webhooks.worker.handover``),
where the embedded worker (``webhooks.worker.embedded``: RQ's worker thread, the watchdog, the
ticker's retries, sweeps and reconciliations, forwarding) works them.

The worker process reads its standard input until the end: when the master is gone, killed
outright too, it stops.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from webhooks.configuration.settings import Settings
from webhooks.service import process_setup

log = logging.getLogger("webhooks.serving")  # the name the docs and log filters know
RESTART_SECONDS = 1.0  # between the worker process's death and its next start
# The worker process yields the CPU to the web processes when both want it: a delivery waits for
# its answer (a provider gives up after ~10 s), an event only for its turn; on an idle core the
# niceness costs the worker nothing. Nice 5 gets about a third of a nice-0 process's share.
WORKER_NICENESS = 5


class WorkerProcess:
    """The worker process, started by gunicorn's master (``when_ready``) and kept running."""

    def __init__(self, command: list[str]) -> None:
        self.command = command
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        self.serving: Callable[[], bool] = lambda: True

    def start(self, serving: Callable[[], bool]) -> None:
        """Start it, and start it again whenever it ends while ``serving()`` (the master shutting
        down closes its listeners first; a Ctrl-C reaches this process before the master's hook)."""
        self.serving = serving
        self._spawn()
        threading.Thread(target=self._watch, name="webhooks-worker-process", daemon=True).start()

    def _spawn(self) -> None:
        with self._lock:
            if not self.stopped.is_set():
                # gunicorn's master reaps every child it sees exit; Popen then reads the code as 0.
                self.proc = subprocess.Popen(self.command, stdin=subprocess.PIPE)

    def _watch(self) -> None:
        while not self.stopped.wait(RESTART_SECONDS):
            proc = self.proc
            if proc is not None and proc.poll() is not None and self.serving() and not self.stopped.is_set():
                log.warning("serve: the worker process %d ended; starting it again", proc.pid)
                self._spawn()

    def stop(self, timeout: float = 10) -> None:
        with self._lock:
            self.stopped.set()
            proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def web_app(settings: Settings) -> Any:
    """A web process's app: no worker of its own, and its deliveries left ``queued`` in the
    database for the worker process."""
    from webhooks import create_app

    app = create_app(dataclasses.replace(settings, embedded_worker=False))
    app.extensions["webhooks"].queue.hand_over()
    return app


def work(settings: Settings) -> None:
    """The worker process (``webhooks serve-worker``): the embedded worker and the handover, until
    SIGTERM, SIGINT or the end of standard input (its master is gone)."""
    from webhooks.runtime import Runtime
    from webhooks.worker import embedded, sweeper
    from webhooks.worker.handover import Handover

    os.nice(WORKER_NICENESS)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    threading.Thread(target=_until_eof, args=(stop.set,), name="webhooks-master-gone", daemon=True).start()
    held = hold(settings.database_url, wait=LOCK_WAIT)  # kept open: the lock lives as long as this process
    if held is False:
        log.error("another webhooks serve works this database; this worker process stops")
        sys.exit(1)
    rt = Runtime(settings)
    rt.start_config()
    started = datetime.now(UTC)
    if held is not None:  # the only worker of its database: no holder of a lease can be alive
        released = rt.store.release_claims()
        if released:
            log.warning("took back %d events the last run was processing when it stopped", released)
    # The embedded queue starts empty: whatever the last run left unfinished is stranded now.
    sweeper.sweep(rt, age=0)
    embedded.start_embedded(rt)  # the worker thread, the watchdog, the ticker, forwarding
    handover = Handover(rt, started)
    handover.start()
    stop.wait()
    handover.stopped.set()  # the worker thread is a daemon: a job cut short is the sweeper's


LOCK_WAIT = 20.0  # seconds the worker process waits for its predecessor's lock (a process on its way out)


def lock_path(database_url: str) -> Path | None:
    """``<database file>.serve-lock`` for a SQLite file (what makes ``serve`` its only server)."""
    from webhooks.configuration import encryption

    key = encryption.key_file(database_url)  # ``<database file>.key``: the same place
    return None if key is None else key.with_name(key.name.removesuffix(".key") + ".serve-lock")


def hold(database_url: str, *, wait: float) -> int | Literal[False] | None:
    """This process's exclusive lock on the database's serve lock, tried for ``wait`` seconds: its
    descriptor (kept open: closing it, or the process's end, releases it), None when the database
    has no lock file (not a SQLite file), False when another process holds it."""
    import fcntl
    import time

    path = lock_path(database_url)
    if path is None:
        return None
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return False
            time.sleep(0.2)  # the predecessor's worker process is on its way out


def taken(database_url: str, wait: float = 5.0) -> str | None:
    """One line when another ``webhooks serve`` works this database (its worker process holds the
    lock), else None; the lock is let go at once (the worker process takes it)."""
    fd = hold(database_url, wait=wait)
    if fd is False:
        path = lock_path(database_url)
        database = path.name.removesuffix(".serve-lock") if path else "the database"
        return f"another webhooks serve is running on {database}: stop it first (one serve per database)"
    if fd is not None:
        os.close(fd)
    return None


def _until_eof(then: Callable[[], object]) -> None:
    try:
        while os.read(sys.stdin.fileno(), 4096):
            pass
    except OSError:
        pass
    then()


def banner(settings: Settings, listeners: list[str], kept: Any, key_file: Any = None, stored: int = 0) -> str:
    """What ``serve`` prints last: where it listens, the console and its password, the endpoints
    (the file's, and how many the database holds: ``stored``)."""
    base = listeners[0] if listeners else "http://127.0.0.1"
    login = (
        f"user admin, password {settings.admin_password} (kept in {kept})"
        if kept
        else "user admin, password from WEBHOOKS_ADMIN_PASSWORD"
    )
    endpoints = [f"POST {base}/webhooks/{name}" for name in settings.endpoints]
    if stored:
        endpoints.append(f"+{stored} from the database (listed at {base}/admin/endpoints)")
    endpoints = endpoints or [
        "none configured: set STRIPE_WEBHOOK_SECRET=… (or another provider's) or write webhooks.toml"
    ]
    lines = [
        f"webhooks {process_setup.version()} serving on {', '.join(listeners)}",
        f"  console    {base}/admin/  {login}",
    ]
    lines += [f"  {'endpoints' if i == 0 else '':9}  {line}" for i, line in enumerate(endpoints)]
    forwards = [f"{name} → {', '.join(names)}" for name, names in settings.forwards.items()]
    destinations = [
        f"{d.name}  {d.target}" + ("" if d.kind == "http" else f"  ({d.kind})") for d in settings.destinations.values()
    ]
    lines += [f"  {'forwards' if i == 0 else '':9}  {line}" for i, line in enumerate(forwards)]
    lines += [f"  {'to' if i == 0 else '':9}  {line}" for i, line in enumerate(destinations)]
    lines += [f"  keys       encryption key kept in {key_file} (back it up with the database)"] if key_file else []
    lines.append(f"  database   {stored_in(settings.database_url)}")
    return "\n".join(lines)


def stored_in(database_url: str) -> str:
    """Where the events are, for the banner: a SQLite file's path, else the URL without its password."""
    from webhooks.urls import redacted

    if database_url.startswith("sqlite:///") and len(database_url) > len("sqlite:///"):
        return f"{Path(database_url.removeprefix('sqlite:///').split('?')[0]).resolve()} (SQLite)"
    return redacted(database_url)
