"""The production worker: RQ's non-forking worker, plus the retry scheduler and the sweeper (and
the same on threads of the web process, for the embedded queue).

The worker owns its runtime and puts it in scope around each job (``runtime.current``).
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
from rq.exceptions import StopRequested

from webhooks import config, reconcile, sweeper
from webhooks.config import Settings
from webhooks.embedded import EmbeddedWorker
from webhooks.jobs import handlers
from webhooks.queue import ScopedWorker, Ticker
from webhooks.runtime import Runtime
from webhooks.store import claims

log = logging.getLogger(__name__)


class Worker(ScopedWorker):
    """Takes RQ's worker arguments, plus the ``runtime`` it performs jobs with; without one
    (``rq worker -w webhooks.jobs.worker.Worker``) it builds its own from the environment."""

    # RQ backs off up to 60 s between attempts to reach a lost Redis; a few seconds keeps the
    # recovery after a Redis restart short at the cost of a few more connection attempts.
    max_connection_wait_time = 4.0

    def __init__(self, *args: Any, runtime: Runtime | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.runtime = runtime or Runtime(config.load())
        self.scope = self.runtime.scope


def run(settings: Settings, *, burst: bool = False) -> bool:
    """Work the queue until stopped (SIGTERM finishes the current job first) or, with ``burst``,
    until it is empty. Survives Redis outages: RQ's loop gives up on some Redis errors, so it is
    started again until a stop is requested."""
    _alias_old_job_path()
    rt = Runtime(settings)
    handlers.load(settings.handler_modules)
    handlers.announce(settings.handler_modules)
    ticker = Ticker(rt.queue, tick(rt), settings.sweep_interval)
    thread = threading.Thread(target=ticker.run, name="webhooks-ticker", daemon=True)
    stop = _Stop()
    stop.install()  # until RQ installs its own: a SIGTERM while it starts is a clean stop too
    try:
        if burst:
            sweeper.sweep(rt)
            ticker.scheduler.acquire_locks()
            ticker.scheduler.enqueue_scheduled_jobs()
        else:
            thread.start()
        # Jobs run in this process: forking per job costs ~13 ms. A killed worker's job is found by
        # the sweeper (its row is `processing` and no transaction holds it) and run again.
        with rt.store.keep():  # one connection for this loop's events, not one per event
            return _work(rt, burst, stop)
    except StopRequested:  # SIGTERM before RQ's handler was installed (or while waiting to restart it)
        return False
    finally:  # a clean stop leaves RQ's scheduler lock to the next worker (Ticker.release)
        ticker.stopped.set()
        if thread.is_alive():
            thread.join(timeout=10)
        else:
            ticker.release()


def _work(rt: Runtime, burst: bool, stop: _Stop) -> bool:
    while True:
        worker = None
        try:
            # RQ's constructor talks to Redis (CLIENT SETNAME): inside the retry, or an outage at
            # this moment would end the process.
            worker = Worker([rt.queue.queue], connection=rt.queue.connection, runtime=rt)
            result = bool(worker.work(burst=burst))
        except (redis.RedisError, OSError) as exc:
            log.warning("worker: Redis unavailable (%s); retrying in 2 s", exc.__class__.__name__)
            result = False
        # An idle worker stops without setting _stop_requested; the signal leaves this date.
        if burst or stop.requested or (worker is not None and (
                worker._stop_requested or worker._shutdown_requested_date is not None)):
            return result
        try:
            if worker is not None:
                log.warning("worker: RQ's loop ended on an error; starting again in 2 s")
            stop.install()  # until RQ installs its own again: SIGTERM while waiting ends the run
            time.sleep(2)
        except StopRequested:  # SIGTERM while waiting: RQ's handler is still installed
            return result


def tick(rt: Runtime) -> Callable[[], None]:
    """A worker's periodic task: start the due reconciliations, then sweep."""
    reconciles = reconcile.scheduled(rt)  # endpoints with reconcile_every

    def run() -> None:
        reconciles()
        sweeper.sweep(rt)

    return run


def start_embedded(rt: Runtime) -> None:
    """Work ``rt``'s queue on threads of this process (the embedded queue: no Redis server), unless
    they run already. A job stuck past its timeout is given up (``webhooks.store.claims.abandon``)."""

    def build() -> EmbeddedWorker:
        return EmbeddedWorker(rt.queue, rt.scope, tick(rt), functools.partial(claims.abandon, rt))

    rt.queue.start_embedded(build)


def _alias_old_job_path() -> None:
    """Jobs queued before the jobs moved under ``webhooks`` name ``jobs.process.process_event``:
    let this worker run them, unless an application package named ``jobs`` is importable."""
    if "jobs" not in sys.modules and importlib.util.find_spec("jobs") is None:
        from webhooks import jobs
        from webhooks.jobs import process

        sys.modules["jobs"], sys.modules["jobs.process"] = jobs, process


class _Stop:
    """SIGTERM/SIGINT while no RQ worker is installed (Redis down): stop instead of dying."""

    def __init__(self) -> None:
        self.requested = False

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: object) -> None:
        self.requested = True
        raise StopRequested
