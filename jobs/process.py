"""``process_event(endpoint, event_id)``: the RQ job that acts on one stored event.

Claim the row (committed, so a worker that dies still counts an attempt), then in one transaction:
lock the row and check the claim is still ours, find the object and its version, serialize per
object, apply the state only when newer, run the handlers, mark the row and add the attempt's
history row — so a failure leaves nothing half done. Two commits per event, one of which waits
for the disk: the claim's commit does not wait for its WAL flush (it is bookkeeping: a crash
before the processing commit, which flushes it too, loses only the claim, and the sweeper requeues
the row), and the claim returns the row the provider's API call needs. Errors are recorded on the
row and re-raised for RQ to retry; after the last try the row is ``failed``.

Exactly once in effect: the claim's attempt number is a token. Two jobs of one event (a replay, a
sweeper recovering a job it believes dead) serialize on the row lock, and only the holder of the
latest claim may mark the row; a row already ``processed`` is never claimed again. While the
transaction runs the row stays locked, which is how the sweeper tells a live ``processing`` row
from one stranded by a killed worker (``FOR UPDATE SKIP LOCKED``; on SQLite the write lock).
Per object, the advisory lock (and the ``objects`` row lock taken by the upsert) serialize events.

Provider APIs (``jobs.fetch``: Stripe re-fetch, PayPal's copy) are called after the claim and
before any lock (``jobs.objects``). A provider whose object state is a fold of its events (Adyen
payments: ``fold``) merges under the object lock, so the fold sees every earlier event.

Each database has its path: ``jobs.postgres`` (three round trips on one connection) and
``jobs.sqlite`` (the handlers outside SQLite's write lock).

A job stuck past its timeout in a call nothing can interrupt (the embedded worker's thread) is
given up by the watchdog (``webhooks.embedded``) through ``abandon``: on SQLite its attempt is
recorded as timed out under its token and its processing lock released; whatever the thread does
when its call returns at last is a superseded claim's, which changes nothing.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from rq import get_current_job
from sqlalchemy import update

from webhooks import handlers, metrics, runtime
from webhooks.db import storable_text
from webhooks.models import Event
from webhooks.words import Status

from . import attempts, fetch, pgwire, postgres, sqlite

log = logging.getLogger(__name__)
TRACEBACK_LIMIT = 8000


def _fail(rt: runtime.Runtime, endpoint: str, event_id: str, attempt: int, last_try: bool,
          started_at: datetime, exc: Exception) -> None:
    """Record the error on the row (if the claim is still ours) and in the attempt history."""
    error = storable_text(f"{exc.__class__.__name__}: {exc}")[:2000]
    trace = storable_text(traceback.format_exc()[-TRACEBACK_LIMIT:])
    _mark_failed(rt, endpoint, event_id, attempt, last_try, error, trace)
    attempts.record(rt, endpoint, event_id, attempt, started_at, "error", error, trace)


def _mark_failed(rt: runtime.Runtime, endpoint: str, event_id: str, attempt: int, last_try: bool,
                 error: str, trace: str) -> bool:
    """The row → queued (failed after the last try) with the error, if the claim is still ours."""
    with rt.sessions.begin() as session:
        marked = session.execute(
            update(Event)
            .where(Event.endpoint == endpoint, Event.event_id == event_id,
                   Event.status == Status.PROCESSING, Event.attempts == attempt)
            .values(status=Status.FAILED if last_try else Status.QUEUED, status_at=datetime.now(UTC),
                    last_error=error, last_traceback=trace)
            .returning(Event.attempts)
        ).first()
    return marked is not None


@dataclass
class _Claim:
    """A running job's claim, by thread: what ``abandon`` needs to settle it for the thread."""

    endpoint: str
    event_id: str
    attempt: int  # the token
    last_try: bool
    started_at: datetime
    clock: float
    label: str
    abandoned: bool = False


_RUNNING: dict[int, _Claim] = {}  # thread ident → the claim its job holds


def abandon(rt: runtime.Runtime, thread: int, timeout: float) -> bool:
    """Give up on the job ``thread`` runs, stuck past its ``timeout`` (seconds); True when its
    attempt was recorded here as timed out (the caller then fails the RQ job: its retry policy).

    SQLite: the attempt is recorded under the claim's token (so a late finish of the thread finds
    the claim superseded) and the thread's processing lock is released. PostgreSQL: the stuck
    transaction holds the row, so nothing is recorded: the thread settles the row when its call
    returns (the sweeper, if it never does)."""
    claim = _RUNNING.get(thread)
    recorded = False
    if claim is not None and rt.engine.dialect.name != "postgresql":
        claim.abandoned = True  # before the mark: its own failure path must record nothing
        error = (f"JobTimeoutException: Task exceeded maximum timeout value ({timeout:g} seconds), blocked"
                 " in a call that cannot be interrupted; its thread was abandoned")
        frame = sys._current_frames().get(thread)
        stack = "".join(traceback.format_stack(frame)) if frame is not None else ""
        trace = storable_text(("Stack of the abandoned thread:\n" + stack)[-TRACEBACK_LIMIT:])
        recorded = _mark_failed(rt, claim.endpoint, claim.event_id, claim.attempt, claim.last_try, error, trace)
        if recorded:
            attempts.record(rt, claim.endpoint, claim.event_id, claim.attempt, claim.started_at, "error",
                            error, trace)
            outcome = Status.FAILED if claim.last_try else "error"
            _measure(claim.label, outcome, claim.clock, claim.event_id, claim.attempt, TimeoutError(error))
    rt.release_processing(thread)
    return recorded


@contextlib.contextmanager
def _wire(rt: runtime.Runtime) -> Iterator[pgwire.Wire | None]:
    """PostgreSQL: the event's connection (``jobs.pgwire``); SQLite: None (the ORM path)."""
    if rt.engine.dialect.name != "postgresql":
        yield None
        return
    with pgwire.wire(rt.engine) as wire:
        yield wire


def process_event(endpoint: str, event_id: str) -> str:
    """Process one event; returns the final status (or ``skipped`` when there was nothing to do)."""
    rt = runtime.current()
    job = get_current_job()
    last_try = job is None or not job.retries_left
    started_at, clock = datetime.now(UTC), time.monotonic()
    label = metrics.endpoint_label(rt, endpoint)
    with rt.processing(), _wire(rt) as wire:
        claimed: Event | postgres.Claimed | None
        if wire is not None:
            claimed = postgres.claim(wire, endpoint, event_id, datetime.now(UTC))
        else:
            with rt.sessions.begin() as session:
                claimed = sqlite.claim(session, endpoint, event_id)
        if claimed is None:
            return "skipped"
        attempt = claimed.attempts
        thread = threading.get_ident()
        claim = _RUNNING[thread] = _Claim(endpoint, event_id, attempt, last_try, started_at, clock, label)
        try:
            # After the claim: a handler module that cannot be imported is a recorded, counted
            # attempt (and in the end a failed event), never a job that retries unseen forever.
            handlers.load(rt.settings.handler_modules)
            if isinstance(claimed, postgres.Claimed):
                assert wire is not None  # claimed through it
                try:
                    status = postgres.process(rt, wire, claimed, started_at)
                finally:  # whatever happened, no transaction stays open (nor its row lock, which
                    wire.end()  # the failure's record below waits for)
            else:
                status = sqlite.process(rt, claimed, started_at)
        except fetch.MismatchError as exc:
            if claim.abandoned:
                return "skipped"  # the watchdog recorded this attempt (``abandon``)
            # Not the provider's event: no handler ran, and no retry can change that.
            _fail(rt, endpoint, event_id, attempt, True, started_at, exc)
            _measure(label, Status.FAILED, clock, event_id, attempt, exc)
            return Status.FAILED
        except Exception as exc:
            if claim.abandoned:
                raise  # the watchdog recorded this attempt (``abandon``)
            _fail(rt, endpoint, event_id, attempt, last_try, started_at, exc)
            _measure(label, Status.FAILED if last_try else "error", clock, event_id, attempt, exc)
            raise
        finally:
            del _RUNNING[thread]
    if status != "skipped":
        _measure(label, status, clock, event_id, attempt)
    return status


def _measure(endpoint: str, outcome: str, clock: float, event_id: str, attempt: int,
             exc: Exception | None = None) -> None:
    """Count the attempt and log its one line (never the payload or the error's message)."""
    duration = time.monotonic() - clock
    metrics.ATTEMPTS.labels(endpoint, outcome).inc()
    metrics.DURATION.labels(endpoint).observe(duration)
    fields = {"endpoint": endpoint, "event_id": event_id, "attempt": attempt, "outcome": outcome,
              "duration_ms": round(duration * 1000, 1), "error": exc.__class__.__name__ if exc else None}
    log.log(logging.WARNING if exc else logging.INFO, "attempt %s", outcome, extra={"fields": fields})
