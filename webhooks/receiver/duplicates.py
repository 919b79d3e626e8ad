"""How many times each stored event was delivered again: counted in memory by the group commit
and written together to ``duplicates`` about once a second (the console shows "delivered n×")."""

from __future__ import annotations

import logging
import threading
import time
import weakref
from datetime import UTC, datetime

from sqlalchemy.exc import SQLAlchemyError

from webhooks.runtime import Runtime
from webhooks.store import duplicate_counts

log = logging.getLogger("webhooks.duplicates")  # the name the docs and log filters know
_every: weakref.WeakSet[Duplicates] = weakref.WeakSet()


def drop_all() -> None:
    """Drop every counter's waiting counts and its timer in this process (a test's end: its database
    goes, and a timer firing later would log that it could not write to it)."""
    for duplicates in list(_every):
        duplicates.drop()


class Duplicates:
    """Duplicate deliveries counted in memory and written together (``duplicates``) at most
    every ``FLUSH_SECONDS``: by the batch writer when that long has passed, else by a timer.

    Counting each duplicate in its own batch's transaction doubled a duplicate's CPU (an upsert
    written and committed per delivery, on the path that today costs one ``INSERT … ON CONFLICT
    DO NOTHING``): in memory it costs a dictionary update. A process that dies loses at most
    that many seconds of counts; the counts are for reading, nothing depends on them. At most
    ``MAX_KEPT`` events wait (a database outage drops counts, never grows memory)."""

    FLUSH_SECONDS = 1.0
    MAX_KEPT = 10_000

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self._lock = threading.Lock()
        self._waiting: dict[tuple[str, str], int] = {}
        self._flushed = time.monotonic()
        self._timer: threading.Timer | None = None
        _every.add(self)

    def drop(self) -> None:
        with self._lock:
            self._waiting = {}
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def add(self, again: dict[tuple[str, str], int], *, inline: bool = True) -> None:
        """Count ``again``; ``inline=False`` (a request's own thread, answered from
        ``webhooks.store.recent``) leaves the write to the timer even when it is due."""
        if not again:
            return
        with self._lock:
            for key, n in again.items():
                if key in self._waiting or len(self._waiting) < self.MAX_KEPT:
                    self._waiting[key] = self._waiting.get(key, 0) + n
            due = inline and time.monotonic() - self._flushed >= self.FLUSH_SECONDS
            if not due and self._timer is None:
                self._timer = threading.Timer(self.FLUSH_SECONDS, self.flush)
                self._timer.daemon = True
                self._timer.start()
        if due:
            self.flush()

    def flush(self) -> None:
        """Write the waiting counts in one transaction (only those of stored events)."""
        with self._lock:
            waiting, self._waiting = self._waiting, {}
            self._flushed = time.monotonic()
            timer, self._timer = self._timer, None
        if timer is not None and timer is not threading.current_thread():
            timer.cancel()
        if not waiting:
            return
        now = datetime.now(UTC)
        try:
            counts = sorted(waiting.items())
            with self.rt.engine.begin() as conn:
                duplicate_counts.add(conn, counts, now)
        except SQLAlchemyError as exc:
            log.warning("could not count %d duplicate deliveries (%s)", sum(waiting.values()), exc.__class__.__name__)
