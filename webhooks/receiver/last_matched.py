"""When each database secret last verified a delivery (``config_secrets.last_matched_at``): noted
in memory by the receiver and written together at most every ``FLUSH_SECONDS``, and at exit.

A write per delivery would put an UPDATE (and on SQLite the write lock) on the receiver's path
for a value that is only read by people; in memory it costs a dictionary store. The write is
``UPDATE … SET last_matched_at = :at WHERE … last_matched_at < :at`` (``store.secret_matches``),
so every process of the deployment (gunicorn's web processes, ``webhooks serve``'s) flushes its
own notes in any order and the newest time wins. A process killed outright loses at most its
last ``FLUSH_SECONDS`` of notes; one that exits normally (gunicorn's workers do, on SIGTERM or a
restart) flushes them from ``atexit``. The file's secrets have no row and are not noted.
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from datetime import UTC, datetime

from sqlalchemy.exc import SQLAlchemyError

from webhooks import providers
from webhooks.providers.base import Endpoint, Verified
from webhooks.receiver.rows import matched_secret
from webhooks.runtime import Runtime
from webhooks.store.configuration import last_matched as secret_matches

log = logging.getLogger("webhooks.matches")


class Matches:
    """The secrets matched since the last flush, each with the time of its latest match."""

    FLUSH_SECONDS = 2.0
    MAX_KEPT = 10_000  # distinct secrets waiting: an outage drops notes, never grows memory

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self._lock = threading.Lock()
        self._waiting: dict[str, datetime] = {}
        self._timer: threading.Timer | None = None

    def note(self, endpoint: Endpoint, verified: Verified) -> None:
        """Note the database secrets that verified ``verified`` (none for the file's endpoints)."""
        if not endpoint.secret_ids:
            return
        provider = providers.get(endpoint.kind)
        found = {matched_secret(endpoint, provider, e.secret_index) for e in verified.events}
        found.discard(None)
        if not found:
            return
        now = datetime.now(UTC)
        with self._lock:
            for secret_id in found:
                if secret_id in self._waiting or len(self._waiting) < self.MAX_KEPT:
                    self._waiting[str(secret_id)] = now
            if self._timer is None:
                self._timer = threading.Timer(self.FLUSH_SECONDS, self.flush)
                self._timer.daemon = True
                self._timer.start()

    def flush(self) -> None:
        """Write the waiting times in one transaction."""
        with self._lock:
            waiting, self._waiting = self._waiting, {}
            timer, self._timer = self._timer, None
        if timer is not None and timer is not threading.current_thread():
            timer.cancel()
        if not waiting:
            return
        try:
            with self.rt.engine.begin() as conn:
                secret_matches.record(conn, waiting)
        except SQLAlchemyError as exc:
            log.warning("could not record when %d secrets last matched (%s)", len(waiting), exc.__class__.__name__)


_matches: weakref.WeakKeyDictionary[Runtime, Matches] = weakref.WeakKeyDictionary()
_matches_lock = threading.Lock()
_at_exit: list[bool] = []  # registered once per process (a fork inherits the registration)


def of(rt: Runtime) -> Matches:
    """The runtime's ``Matches`` (one per runtime)."""
    with _matches_lock:
        found = _matches.get(rt)
        if found is None:
            if not _at_exit:
                atexit.register(flush_all)
                _at_exit.append(True)
            found = _matches[rt] = Matches(rt)
        return found


def flush_all() -> None:
    """Flush every runtime's notes (at exit; tests)."""
    with _matches_lock:
        every = list(_matches.values())
    for found in every:
        found.flush()
