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

The database's side is the store's (``rt.store``: ``claim``, ``process``, ``fail``; each adapter
has its path, see ``webhooks.store``); this job orders it with the provider's API and the
handlers, and counts each attempt.

A job stuck past its timeout in a call nothing can interrupt (the embedded worker's thread) is
given up by the watchdog (``webhooks.worker.embedded``) through ``webhooks.worker.claims.abandon``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from rq import get_current_job

from webhooks import lanes, metrics, providers, runtime, tracing
from webhooks.forward import deliveries, filtering
from webhooks.forward.dispatcher import nudge
from webhooks.storable import storable_text
from webhooks.store.base import Claimed, Seen, Work
from webhooks.vocabulary import INTERRUPTED, Reason, Status
from webhooks.worker import handlers, job_errors
from webhooks.worker.claims import TRACEBACK_LIMIT, Claim, Interrupted, abandon, heartbeat, lease, measure, running

from . import fetch
from .objects import Prepared, merge, prepare

__all__ = ["abandon", "process_event", "work"]
log = logging.getLogger(__name__)


def _fail(rt: runtime.Runtime, claim: Claim, last_try: bool, exc: Exception) -> None:
    """Record the error on the row and in the attempt history; a stale claim's, in the history only."""
    error = storable_text(f"{exc.__class__.__name__}: {exc}")[:2000]
    trace = storable_text(traceback.format_exc()[-TRACEBACK_LIMIT:])
    if not rt.store.fail(claim.endpoint, claim.event_id, claim.attempt, last_try, error, trace, claim.started_at):
        _stale(rt, claim, error)


def _stale(rt: runtime.Runtime, claim: Claim, error: str | None) -> None:
    """The attempt outlived its claim (lease over, or superseded): it changed nothing on the row;
    its one line, and its attempt's row."""
    log.warning(
        "attempt %s of %s/%s outlived its claim (lease over or superseded): the event was left to the newer claim",
        claim.attempt,
        claim.endpoint,
        claim.event_id,
    )
    rt.store.stale(claim.endpoint, claim.event_id, claim.attempt, claim.started_at, error)


FORWARD = "forward → "  # an attempt's ``handlers`` entry for each destination the event went to


def destinations_for(rt: runtime.Runtime, endpoint: str, event_type: str) -> list[str]:
    """The destinations an event of ``endpoint`` and ``event_type`` is forwarded to."""
    configured = rt.settings.destinations
    return [name for name in rt.settings.forwards.get(endpoint, ()) if configured[name].wants(event_type)]


def work(rt: runtime.Runtime, claimed: Claimed) -> Work:
    """What processing ``claimed`` runs (``webhooks.store.base.Work``): its provider's data and
    object, its fold, the handlers registered for it, and the deliveries to its destinations
    (created in the transaction that marks the event)."""
    found = handlers.handlers_for(claimed.endpoint, claimed.kind, claimed.event_type, rt.settings.handler_modules)
    forward = destinations_for(rt, claimed.endpoint, claimed.event_type)
    provider = providers.get(claimed.kind)
    fold = provider.fold if provider.folds else None  # the declared capability

    parent = tracing.traceparent()  # the job's span: each forward continues its trace
    # What the attempt records: the handlers, and the destinations the event goes to (``run``
    # takes out those whose filter refuses it).
    names = handlers.names(found) + [FORWARD + name for name in forward]

    def run(seen: Seen) -> None:
        context = handlers.HandlerEvent(
            claimed.endpoint,
            claimed.kind,
            claimed.event_id,
            claimed.event_type,
            seen.data,
            seen.object_type,
            seen.object_id,
            seen.version,
            seen.is_latest,
            claimed.attempts,
            seen.session,
        )
        for handler in found:
            with tracing.span("handler", handler=handlers.name(handler)):
                handlers.call(handler, context, seen.state)
        through = filtering.kept(seen.session, rt.settings.destinations, forward, context) if forward else []
        for name in set(forward) - set(through):  # the attempt records only where it went
            names.remove(FORWARD + name)
        if through:
            targets = {name: rt.settings.destinations[name].identity for name in through}
            deliveries.create(seen.session, context, targets, datetime.now(UTC), parent)

    return Work(
        _spanned("fetch", functools.partial(prepare, claimed, rt.settings)),
        None if fold is None else functools.partial(merge, fold),
        names,
        run,
    )


def _spanned(name: str, step: Callable[[], Prepared]) -> Callable[[], Prepared]:
    """``step`` in a span named ``name`` (``step`` itself when tracing is off)."""
    if not tracing.ENABLED:
        return step

    def spanned() -> Prepared:
        with tracing.span(name):
            return step()

    return spanned


def process_event(endpoint: str, event_id: str) -> str:
    """Process one event; returns the final status (or ``skipped`` when there was nothing to do).

    Hosted by our worker, an event whose processing calls its provider's API is handed to its
    endpoint's lane (``handed``) or, the lane being full, deferred (``deferred``): the shared
    worker never waits on one endpoint's API (``webhooks.lanes``)."""
    rt = runtime.current()
    job = get_current_job()
    retries_left = None if job is None else job.retries_left
    configured = rt.settings.endpoints.get(endpoint)
    if configured is None:  # created since this process's snapshot (its notice not seen yet)
        configured = _reloaded(rt, endpoint)
    calls_out = configured is not None and providers.get(configured.kind).calls_out(configured)
    if job is not None and calls_out and lanes.hosted():
        return _hand(rt, endpoint, event_id, retries_left)
    return _process(rt, endpoint, event_id, not retries_left)


def _reloaded(rt: runtime.Runtime, endpoint: str) -> Any:
    """The endpoint as the database has it now: an event is never processed by a snapshot that
    does not know its endpoint (its handlers' kind, its forwards), which a runtime endpoint's first
    event can meet before this process saw the change. None: the endpoint is gone."""
    try:
        rt.reload_config()
    except Exception as exc:  # the database's error is the attempt's: recorded when it claims
        log.warning("could not reload the configuration for %s (%s)", endpoint, exc.__class__.__name__)
    return rt.settings.endpoints.get(endpoint)


def _hand(rt: runtime.Runtime, endpoint: str, event_id: str, retries_left: int | None) -> str:
    def task() -> None:
        with rt.scope():
            try:
                _process(rt, endpoint, event_id, not retries_left, lane=True)
            except Exception:
                if retries_left:  # the failure is recorded; RQ's retry, as the worker would schedule it
                    interval = rt.queue.build(endpoint, event_id)
                    interval.retries_left = retries_left
                    rt.queue.defer(endpoint, event_id, interval.get_retry_interval(), retries_left - 1)

    defer = functools.partial(rt.queue.defer, endpoint, event_id)
    return lanes.hand(rt.lanes, endpoint, event_id, task, defer)


def _process(rt: runtime.Runtime, endpoint: str, event_id: str, last_try: bool, lane: bool = False) -> str:
    """Claim, process and mark one event. In a ``lane`` the provider's API is called before the
    runtime's processing lock is taken (SQLite's is process-wide: a slow API would hold every
    endpoint's events); inline the lock is held from the claim to the mark, as always."""
    started_at, clock = datetime.now(UTC), time.monotonic()
    label = metrics.endpoint_label(rt, endpoint)
    locked = contextlib.nullcontext if not lane else rt.processing
    with contextlib.nullcontext() if lane else rt.processing(), rt.store.keep(), contextlib.ExitStack() as spans:
        claim_started = time.time_ns()
        with locked():
            now = datetime.now(UTC)
            claimed = rt.store.claim(endpoint, event_id, now, now + timedelta(seconds=lease(rt.settings.job_timeout)))
        if claimed is None:
            return "skipped"
        attempt = claimed.attempts
        traced = _job_span(spans, claimed, claim_started)
        claim = Claim(endpoint, event_id, attempt, last_try, started_at, clock, label)
        with running(claim), heartbeat(rt, claim):  # the lease renewed while the claim is held
            job_errors.reach()  # from here on an error is this attempt's, recorded below
            try:
                # After the claim: a handler module that cannot be imported is a recorded, counted
                # attempt (and in the end a failed event), never a job that retries unseen forever.
                handlers.load(rt.settings.handler_modules)
                todo = work(rt, claimed)
                if lane:
                    todo = dataclasses.replace(todo, prepare=functools.partial(_ready, todo.prepare()))
                with locked(), tracing.span("mark"):  # the transaction that runs the handlers and marks the row
                    status = rt.store.process(claimed, todo, started_at)
                    if status == "skipped" and not claim.abandoned:
                        _stale(rt, claim, None)
                traced.set("outcome", status)
            except Interrupted:  # the worker's stop timeout passed: released, run again by the next worker
                if claim.abandoned:
                    raise
                with locked():
                    released = rt.store.interrupt(endpoint, event_id, attempt, started_at)
                if released:
                    lanes.after(functools.partial(_again, rt, endpoint, event_id))
                log.warning("stopping: attempt %s of %s/%s interrupted and released", attempt, endpoint, event_id)
                measure(label, INTERRUPTED, clock, event_id, attempt)
                return INTERRUPTED
            except fetch.UnknownObjectError:
                if claim.abandoned:
                    return "skipped"  # the watchdog recorded this attempt (``abandon``)
                # Anyone may name an object: the provider has none, so nothing ran and nothing pages.
                with locked():
                    dismissed = rt.store.dismiss(endpoint, event_id, attempt, Reason.UNKNOWN_OBJECT, started_at)
                if not dismissed:
                    with locked():
                        _stale(rt, claim, None)
                    return "skipped"  # a newer claim took over; it decides
                metrics.child(metrics.REJECTIONS, label, Reason.UNKNOWN_OBJECT).inc()
                measure(label, Status.IGNORED, clock, event_id, attempt)
                return Status.IGNORED
            except fetch.MismatchError as exc:
                if claim.abandoned:
                    return "skipped"  # the watchdog recorded this attempt (``abandon``)
                # Not the provider's event: no handler ran, and no retry can change that.
                with locked():
                    _fail(rt, claim, True, exc)
                measure(label, Status.FAILED, clock, event_id, attempt, exc)
                return Status.FAILED
            except Exception as exc:
                if claim.abandoned:
                    raise  # the watchdog recorded this attempt (``abandon``)
                with locked():
                    _fail(rt, claim, last_try, exc)
                measure(label, Status.FAILED if last_try else "error", clock, event_id, attempt, exc)
                raise
    if status != "skipped":
        measure(label, status, clock, event_id, attempt)
        if rt.settings.forwards.get(endpoint):
            nudge()  # this process's forwarder sends them now
    return status


def _again(rt: runtime.Runtime, endpoint: str, event_id: str) -> None:
    """The interrupted event's job, queued again for the next worker (the row is ``queued``)."""
    try:
        rt.queue.requeue(endpoint, event_id, force=True)
    except Exception as exc:  # Redis gone: the `queued` row is the sweeper's
        log.warning("could not queue %s/%s again (%s): the sweeper will", endpoint, event_id, exc.__class__.__name__)


def _job_span(spans: contextlib.ExitStack, claimed: Claimed, claim_started: int) -> tracing.Traced:
    """The job's span, in the trace of the event's receipt (its row's ``traceparent``), from the
    claim's start (the claim tells which trace: its own span is recorded once it is done)."""
    if not tracing.ENABLED:
        return tracing.QUIET
    spans.enter_context(tracing.linked(claimed.traceparent))
    traced = spans.enter_context(
        tracing.span(
            "job",
            start=claim_started,
            endpoint=claimed.endpoint,
            kind=claimed.kind,
            event_id=claimed.event_id,
            event_type=claimed.event_type,
            attempt=claimed.attempts,
        )
    )
    tracing.record("claim", claim_started, attempt=claimed.attempts)
    return traced


def _ready(prepared: Prepared) -> Prepared:
    return prepared
