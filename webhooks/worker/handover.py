"""``webhooks serve``'s web processes hand their events to its worker process through the database.

The embedded queue is an in-process fakeredis, so it cannot be shared by processes (its TCP server
lost jobs when a client was killed). The web processes queue nothing (``JobQueue.hand_over``):
every committed delivery is already a ``queued`` row, and so is every replayed event. The worker
process polls ``ix_events_unfinished`` for ``queued`` rows every ``POLL_SECONDS`` and
queues their jobs on its own embedded queue (``JobQueue.admit``), where the unchanged RQ worker
thread, watchdog and ticker of ``webhooks.worker.embedded`` take them.

A row's ``status_at`` is taken before its transaction commits, so a row may commit a little after
rows stamped later: each poll looks ``LOOKBACK`` seconds behind the newest stamp it saw, and
remembers what it handed on in that window (each row once per stamp: a replay stamps it anew).
A row that commits later still is the sweeper's, as any stranded row is (``WEBHOOKS_SWEEP_AGE``).
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta

from webhooks.runtime import Runtime
from webhooks.store.sqlite import SqliteStore

log = logging.getLogger("webhooks.handover")  # the name the docs and log filters know
POLL_SECONDS = 0.05  # between polls that found nothing new: a delivery waits about this long
LOOKBACK = timedelta(seconds=2)  # how late a row may commit after its status_at and still be seen here
LOOKBACK_EVERY = 1.0  # seconds between polls that look back (the others read only newer stamps)
PAGE = 2000  # rows per read; a full page is followed at once by the next


class Handover:
    """Polls the database for ``queued`` rows and queues their jobs on ``rt``'s embedded queue."""

    def __init__(self, rt: Runtime, since: datetime) -> None:
        self.rt = rt
        self.newest = since  # the newest stamp seen (the start-up sweep queued everything older)
        self.looked_back = -LOOKBACK_EVERY  # ``time.monotonic`` of the last look back: none yet
        self.handed: dict[tuple[str, str], datetime] = {}  # within the look-back: key → stamp handed on
        self.stopped = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self.run, name="webhooks-handover", daemon=True).start()

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                more = self.poll(time.monotonic())
            except Exception as exc:  # the database or the queue failed: the next poll retries
                log.warning("handover: poll failed (%s: %s)", exc.__class__.__name__, str(exc)[:200])
                log.debug("handover: poll failed", exc_info=True)
                more = False
            if not more:
                self.stopped.wait(POLL_SECONDS)

    def poll(self, clock: float) -> bool:
        """Queue the jobs of the ``queued`` rows not handed on yet; True when a full page was read
        and more may wait. Reads the rows stamped since the newest stamp seen; once every
        ``LOOKBACK_EVERY`` seconds from ``LOOKBACK`` before it."""
        since = self.newest
        if clock - self.looked_back >= LOOKBACK_EVERY:
            since, self.looked_back = since - LOOKBACK, clock
        store = self.rt.store
        if not isinstance(store, SqliteStore):
            raise TypeError("the handover is SQLite's (webhooks serve)")
        found = store.queued_since(since, PAGE)
        new = [(p, e, at) for p, e, at in found if self.handed.get((p, e)) != at]
        if new:
            self.rt.queue.admit([(p, e) for p, e, _ in new])
            self.handed.update(((p, e), at) for p, e, at in new)
        if not found or found[-1][2] <= self.newest:
            return False
        self.newest = found[-1][2]
        floor = self.newest - LOOKBACK
        self.handed = {key: at for key, at in self.handed.items() if at >= floor}
        return len(found) == PAGE
