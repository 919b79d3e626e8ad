"""The claims running jobs hold, by thread, their leases, and ``abandon``: the watchdog's way to
give up on one.

A claim is leased (``claimed_until``, ``webhooks.store.transitions``) for the job's timeout plus
``LEASE_GRACE`` (``lease``); while a job holds its claim, ``heartbeat`` has the process's one
heartbeat thread renew the lease (``Store.renew``, under the claim's token), so a provider call
that drips past the sweep age keeps its row. Code that runs a call for a job on another thread
takes the job's claim (``held``) and renews it itself (``renew``) or holds ``heartbeat`` around
the call. A killed worker renews nothing: its row is the sweeper's once the lease runs out.

A job registers its claim while it processes (``running``). The embedded worker's watchdog
(``webhooks.worker.embedded``) calls ``abandon`` for a job stuck past its timeout in a call nothing can
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
from datetime import UTC, datetime, timedelta

from webhooks import metrics
from webhooks.runtime import Runtime
from webhooks.storable import storable_text
from webhooks.vocabulary import Status

log = logging.getLogger("webhooks.jobs.process")  # the attempt lines' logger, as before the store
TRACEBACK_LIMIT = 8000
LEASE_GRACE = 30.0  # seconds a lease outlasts the job's timeout: recording a timed-out attempt, clocks
RENEWALS = 3  # renewals a lease's length: a late or failed one leaves the lease live
# The longest lease, whatever the job timeout: the heartbeat renews it while its holder lives, so
# it only bounds how long a dead holder (SIGKILL, an OOM kill) keeps its events from the others.
MAX_LEASE = 60.0


class Interrupted(BaseException):
    """Raised in a job's thread when its worker's stop timeout (``WEBHOOKS_STOP_TIMEOUT``) passed
    with the job still running (``webhooks.worker.loop``): the attempt is rolled back and released."""


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


def held() -> Claim | None:
    """The claim this thread's job holds (None: none): what a provider call run on another thread
    for the job passes to ``renew`` or ``heartbeat``."""
    return _RUNNING.get(threading.get_ident())


def lease(job_timeout: float) -> float:
    """A claim's lease in seconds: the job's timeout and the grace, at most ``MAX_LEASE`` (renewed
    every third of it while the job runs: a longer job keeps its claim, a dead holder loses it)."""
    return min(job_timeout + LEASE_GRACE, MAX_LEASE)


def renew(rt: Runtime, claim: Claim) -> bool:
    """Extend ``claim``'s lease to now plus ``lease`` (a heartbeat by hand, e.g. from a thread
    that runs a provider call for the job); False: not renewed (``Store.renew``)."""
    until = datetime.now(UTC) + timedelta(seconds=lease(rt.settings.job_timeout))
    return rt.store.renew(claim.endpoint, claim.event_id, claim.attempt, until)


@dataclass
class _Lease:
    rt: Runtime
    claim: Claim
    seconds: float  # its length
    renewed: float  # time.monotonic() of the claim or the last renewal


_LEASES: dict[int, _Lease] = {}  # id → a held claim's lease, renewed by the one heartbeat thread
_leases_lock = threading.Lock()
_beating: list[threading.Thread] = []  # the process's heartbeat thread, started on first use
TICK = 1.0  # at most this many seconds between the heartbeat thread's looks at the leases


@contextmanager
def heartbeat(rt: Runtime, claim: Claim) -> Iterator[None]:
    """While inside, ``claim``'s lease is renewed every ``1/RENEWALS`` of its length (to now plus
    ``lease``) by one thread of the process, whatever the job's thread is blocked in. Nothing is
    started per job: a short job costs two dictionary writes."""
    entry = _Lease(rt, claim, lease(rt.settings.job_timeout), claim.clock)
    with _leases_lock:
        _LEASES[id(entry)] = entry
        if not (_beating and _beating[0].is_alive()):  # none yet, or a forked child's copy
            _beating[:] = [threading.Thread(target=_beat, name="webhooks lease heartbeat", daemon=True)]
            _beating[0].start()
    try:
        yield
    finally:
        with _leases_lock:
            del _LEASES[id(entry)]


def _beat() -> None:
    while True:
        with _leases_lock:
            leases = list(_LEASES.values())
        tick = min([TICK] + [e.seconds / RENEWALS for e in leases])
        time.sleep(tick / 4)  # a renewal is at most a quarter of a tick late
        for entry in leases:
            if time.monotonic() - entry.renewed >= entry.seconds / RENEWALS:
                _renew(entry)


def _renew(entry: _Lease) -> None:
    """One renewal; errors are logged, never raised (the lease left still runs, the next may succeed)."""
    claim = entry.claim
    with _leases_lock:
        if id(entry) not in _LEASES:
            return  # the job let its claim go meanwhile
    entry.renewed = time.monotonic()
    try:
        renew(entry.rt, claim)
    except Exception:
        log.warning("could not renew the lease of %s/%s", claim.endpoint, claim.event_id, exc_info=True)


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
