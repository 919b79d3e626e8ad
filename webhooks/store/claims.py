"""The claims running jobs hold, by thread, and ``abandon``: the watchdog's way to give up on one.

A job registers its claim while it processes (``running``). The embedded worker's watchdog
(``webhooks.embedded``) calls ``abandon`` for a job stuck past its timeout in a call nothing can
interrupt: the store records its attempt as timed out under its token when it can (SQLite; on
PostgreSQL the stuck transaction holds the row), and the thread's processing lock is released;
whatever the thread does when its call returns at last is a superseded claim's, which changes
nothing. ``measure`` counts and logs an attempt, for the job and for ``abandon`` alike.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from webhooks import metrics
from webhooks.runtime import Runtime
from webhooks.storable import storable_text
from webhooks.vocabulary import Status

log = logging.getLogger("webhooks.jobs.process")  # the attempt lines' logger, as before the store
TRACEBACK_LIMIT = 8000


@dataclass
class Claim:
    """A running job's claim: what ``abandon`` needs to settle it for the thread."""

    endpoint: str
    event_id: str
    attempt: int  # the token
    last_try: bool
    started_at: datetime
    clock: float  # time.monotonic() at the start
    label: str  # the endpoint's metrics label
    abandoned: bool = False  # its attempt was recorded by ``abandon``: the job records nothing


_RUNNING: dict[int, Claim] = {}  # thread ident → the claim its job holds


@contextmanager
def running(claim: Claim) -> Iterator[Claim]:
    """``claim`` is this thread's while inside."""
    thread = threading.get_ident()
    _RUNNING[thread] = claim
    try:
        yield claim
    finally:
        del _RUNNING[thread]


def abandon(rt: Runtime, thread: int, timeout: float) -> bool:
    """Give up on the job ``thread`` runs, stuck past its ``timeout`` (seconds); True when its
    attempt was recorded here as timed out (the caller then fails the RQ job: its retry policy)."""
    claim = _RUNNING.get(thread)
    recorded = False
    if claim is not None:
        error = (
            f"JobTimeoutException: Task exceeded maximum timeout value ({timeout:g} seconds), blocked"
            " in a call that cannot be interrupted; its thread was abandoned"
        )
        frame = sys._current_frames().get(thread)
        stack = "".join(traceback.format_stack(frame)) if frame is not None else ""
        trace = storable_text(("Stack of the abandoned thread:\n" + stack)[-TRACEBACK_LIMIT:])
        recorded = rt.store.time_out(claim, error, trace)
        if recorded:
            outcome = Status.FAILED if claim.last_try else "error"
            measure(claim.label, outcome, claim.clock, claim.event_id, claim.attempt, TimeoutError(error))
    rt.release_processing(thread)
    return recorded


def measure(
    endpoint: str, outcome: str, clock: float, event_id: str, attempt: int, exc: Exception | None = None
) -> None:
    """Count the attempt and log its one line (never the payload or the error's message)."""
    duration = time.monotonic() - clock
    metrics.ATTEMPTS.labels(endpoint, outcome).inc()
    metrics.DURATION.labels(endpoint).observe(duration)
    fields = {
        "endpoint": endpoint,
        "event_id": event_id,
        "attempt": attempt,
        "outcome": outcome,
        "duration_ms": round(duration * 1000, 1),
        "error": exc.__class__.__name__ if exc else None,
    }
    log.log(logging.WARNING if exc else logging.INFO, "attempt %s", outcome, extra={"fields": fields})
