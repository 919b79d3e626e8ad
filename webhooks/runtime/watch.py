"""Learn of runtime configuration changes within a second (#32), on a daemon thread per runtime.

PostgreSQL: a connection of its own LISTENs on ``config_items.CHANNEL`` (each change notifies in
its transaction, so the notice comes at commit). SQLite: ``config_version`` is read every
``POLL`` s (one indexed single-row read). Both also compare the version every ``SAFETY`` s (a
notice lost with its connection) and reload when a secret's window opens or closes
(``Watched.config_next_change``). The thread holds its runtime weakly and ends with it, or with
``stop``. A failed read or reload is logged once per distinct error, and the old snapshot stays.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import Engine

from webhooks.store.configuration.items import CHANNEL

log = logging.getLogger("webhooks.config")  # the name log filters know (the module moved, #39)
SQL_VERSION = "SELECT version FROM config_version WHERE id = 1"  # ``config_items.VERSION``, as plain SQL
POLL = 0.25  # seconds between SQLite's reads of the version; PostgreSQL's wait for a notice
SAFETY = 5.0  # seconds between PostgreSQL's own reads of the version (a lost notice)
RETRY = 1.0  # seconds before a lost LISTEN connection is opened again


class Watched(Protocol):
    """What the watcher reads of a runtime (``webhooks.runtime.Runtime``)."""

    engine: Engine
    config_version: int
    config_next_change: datetime | None

    def reload_config(self) -> None: ...


_every: weakref.WeakSet[Watcher] = weakref.WeakSet()


def stop_all() -> None:
    """Stop every watcher of this process (a test's end: its databases go, and a watcher of a
    runtime not yet collected would keep trying them)."""
    for watcher in list(_every):
        watcher.stop.set()


class Watcher:
    def __init__(self, rt: Watched) -> None:
        self._rt = weakref.ref(rt)
        self.stop = threading.Event()
        _every.add(self)
        self._last_error = ""
        self.thread = threading.Thread(target=self._run, name="webhooks-config-watch", daemon=True)

    def start(self) -> Watcher:
        self.thread.start()
        return self

    def _run(self) -> None:
        rt = self._rt()
        postgres = rt is not None and rt.engine.dialect.name == "postgresql"
        url = rt.engine.url.set(drivername="postgresql").render_as_string(hide_password=False) if rt else ""
        del rt  # held weakly: the runtime may go, and this thread with it
        while not self.stop.is_set() and self._rt() is not None:
            try:
                self._listen(url) if postgres else self._poll()
                return
            except Exception as exc:  # a database that went away: said once, tried again
                self._failed(exc)
                self.stop.wait(RETRY)

    def _poll(self) -> None:
        """SQLite: the version read over a read-only connection of the watcher's own (never the
        app's pool: a request never waits for a watcher, and the app's statements are its own)."""
        import sqlite3

        rt = self._rt()
        path = rt.engine.url.database if rt is not None else None
        del rt
        conn: sqlite3.Connection | None = None
        try:
            while not self.stop.wait(POLL):
                if conn is None and path and Path(path).exists():
                    conn = sqlite3.connect(f"{Path(path).absolute().as_uri()}?mode=ro", uri=True, timeout=1)
                if not self._check(_reader(conn)):
                    return
        finally:
            if conn is not None:
                conn.close()

    def _listen(self, url: str) -> None:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"LISTEN {CHANNEL}")
            checked = time.monotonic()

            def read() -> int | None:
                return _scalar(conn.execute(SQL_VERSION).fetchone())

            if not self._check(read):  # a change between the last load and the LISTEN
                return
            while not self.stop.is_set():
                noticed = any(True for _ in conn.notifies(timeout=POLL, stop_after=1))
                for _ in conn.notifies(timeout=0.01):  # the rest of a burst: one reload for all
                    pass
                safety = time.monotonic() - checked >= SAFETY
                if safety:
                    checked = time.monotonic()
                if not self._check(read if noticed or safety else None):
                    return

    def _check(self, version: Callable[[], int | None] | None) -> bool:
        """Reload when ``version()`` (read over the watcher's own connection; None: nothing to read
        yet) differs from the runtime's, or a secret's window opened or closed; ``version`` None:
        only the window is looked at. False once the runtime is gone."""
        rt = self._rt()
        if rt is None:
            return False
        try:
            found = version() if version is not None else None
            changed = found is not None and found != rt.config_version
            due = rt.config_next_change is not None and datetime.now(UTC) >= rt.config_next_change
            if changed or due:
                rt.reload_config()
            self._last_error = ""
        except Exception as exc:
            self._failed(exc)
        return True

    def _failed(self, exc: Exception) -> None:
        said = f"{exc.__class__.__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        if said != self._last_error:
            log.warning("runtime configuration: keeping the current snapshot (%s)", said)
            self._last_error = said


def _scalar(row: Any) -> int | None:
    return int(row[0]) if row is not None else None


def _reader(conn: Any) -> Callable[[], int | None] | None:
    """The version as ``conn`` (a DB-API connection) reads it; None without a connection."""
    if conn is None:
        return None
    return lambda: _scalar(conn.execute(SQL_VERSION).fetchone())
