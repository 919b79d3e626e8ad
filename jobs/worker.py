"""The production worker: RQ's non-forking worker, plus the retry scheduler and the sweeper."""

from __future__ import annotations

from rq import SimpleWorker

from jobs import handlers
from webhooks.config import Settings
from webhooks.queue import Ticker
from webhooks.runtime import Runtime


def run(settings: Settings, *, burst: bool = False) -> bool:
    """Work the queue until stopped (SIGTERM finishes the current job first) or, with ``burst``,
    until it is empty."""
    rt = Runtime(settings).activate()
    handlers.load(settings.handler_modules)
    ticker = Ticker(rt.queue, rt.sweep, settings.sweep_interval)
    if burst:
        rt.sweep()
        ticker.scheduler.acquire_locks()
        ticker.scheduler.enqueue_scheduled_jobs()
    else:
        import threading

        threading.Thread(target=ticker.run, name="webhooks-ticker", daemon=True).start()
    # Jobs run in this process: forking per job costs ~13 ms; a killed worker's job is recovered
    # by RQ's abandoned-job handling and the sweeper.
    worker = SimpleWorker([rt.queue.queue], connection=rt.queue.connection)
    return worker.work(burst=burst)
