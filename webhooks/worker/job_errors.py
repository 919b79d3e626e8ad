"""Jobs a worker could not run: the job function's import checked when a worker starts, and a job
that fails before it reaches its attempt record counted, logged and written on its event.

A job fails *outside* the handler when RQ cannot import its function (``import``), cannot read its
arguments (``deserialize``), or the job raised before its claim was registered (``other``: its
runtime, its claim). Such a failure never reaches ``jobs.process``'s own bookkeeping, so left
alone the event would stay ``queued`` with "0 tries" while RQ and the sweeper retried it for ever.
Here it is counted (``webhooks_job_errors_total{reason}``), logged on one line, and — when the job
names an event — recorded on it under a claim of its own: an attempt with the error "worker could
not run this job: …", so the event ends ``failed`` after the usual attempts.
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
import traceback
from datetime import UTC, datetime, timedelta
from typing import Any

from rq.job import Job

from webhooks import metrics
from webhooks.queue import JOB
from webhooks.runtime import Runtime
from webhooks.storable import storable_text
from webhooks.vocabulary import JOB_ERROR
from webhooks.worker.claims import lease

log = logging.getLogger("webhooks.worker")
REASONS = ("import", "deserialize", "other")
_reached = threading.local()  # this thread's job registered its claim (``reached``)


def check_job() -> str | None:
    """None when this process can import the job function; else one line naming it, where this
    process's ``webhooks`` comes from, and what to do (every worker checks it when it starts)."""
    module, _, name = JOB.rpartition(".")
    try:
        getattr(importlib.import_module(module), name)
    except Exception as exc:
        where = getattr(sys.modules.get("webhooks"), "__file__", None) or "?"
        return (
            f"cannot import the job function {JOB} ({exc.__class__.__name__}: {_first_line(exc)}); this process"
            f" loads webhooks from {where.removesuffix('/__init__.py')}: install the package (pip install .)"
            " and start the worker with the installed command"
        )
    return None


def starting() -> None:
    """A job starts on this thread: nothing reached yet."""
    _reached.value = False


def reach() -> None:
    """This thread's job registered its claim: from here on it records its own attempt."""
    _reached.value = True


def unrunnable(job: Job) -> str | None:
    """Why RQ cannot run ``job`` before calling it (``import``, ``deserialize``), or None."""
    try:
        job.func_name  # noqa: B018  # reading these deserializes the job's data
        job.args  # noqa: B018
        job.kwargs  # noqa: B018
    except Exception:
        return "deserialize"
    try:
        job.func  # noqa: B018  # resolving it imports the function
    except Exception:
        return "import"
    return None


def failed(rt: Runtime | None, job: Job, reason: str | None, exc: BaseException | None) -> None:
    """``job`` raised ``exc``: when it failed outside the handler (``reason`` from ``unrunnable``,
    else ``other`` unless it reached its claim), count it, log it and record it on its event.
    Best effort: it never raises (RQ's own failure handling goes on after it)."""
    if reason is None and getattr(_reached, "value", True):
        return  # the job recorded its attempt itself (jobs.process)
    reason = reason or "other"
    detail = f"{exc.__class__.__name__}: {_first_line(exc)}" if exc is not None else "unknown error"
    metrics.JOB_ERRORS.labels(reason).inc()
    event = _event_of(job)
    fields: dict[str, Any] = {"job_id": job.id, "reason": reason, "error": exc.__class__.__name__ if exc else None}
    if event is not None:
        fields.update(endpoint=event[0], event_id=event[1])
    log.error("worker could not run job %s (%s): %s", job.id, reason, detail, extra={"fields": fields})
    if event is not None and rt is not None:
        try:
            _record(rt, job, event, detail, exc)
        except Exception as record_exc:  # the database is down too: the sweeper brings the event back
            log.warning("worker could not record the job's error on its event (%s)", record_exc.__class__.__name__)


def _record(rt: Runtime, job: Job, event: tuple[str, str], detail: str, exc: BaseException | None) -> None:
    endpoint, event_id = event
    now = datetime.now(UTC)
    claimed = rt.store.claim(endpoint, event_id, now, now + timedelta(seconds=lease(rt.settings.job_timeout)))
    if claimed is None:
        return  # nothing to do for it (processed meanwhile, or gone)
    last_try = not job.retries_left or claimed.attempts >= rt.settings.max_attempts
    trace = "".join(traceback.format_exception(exc)) if exc is not None else ""
    error = storable_text(JOB_ERROR + detail)[:2000]
    rt.store.fail(endpoint, event_id, claimed.attempts, last_try, error, storable_text(trace[-8000:]), now)


def _event_of(job: Job) -> tuple[str, str] | None:
    """The (endpoint, event_id) a processing job names, when its arguments can be read."""
    try:
        args = tuple(job.args)
        if job.func_name == JOB and len(args) == 2 and all(isinstance(a, str) for a in args):
            return args[0], args[1]
    except Exception:
        pass
    return None


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else ""
