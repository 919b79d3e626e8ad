"""The production worker: RQ's non-forking worker, plus the retry scheduler and the sweeper."""

from __future__ import annotations

import logging
import threading
import time

import redis
from rq import SimpleWorker
from rq.exceptions import StopRequested

from jobs import handlers
from webhooks.config import Settings
from webhooks.queue import Ticker
from webhooks.runtime import Runtime

log = logging.getLogger(__name__)


class Worker(SimpleWorker):
    # RQ backs off up to 60 s between attempts to reach a lost Redis; a few seconds keeps the
    # recovery after a Redis restart short at the cost of a few more connection attempts.
    max_connection_wait_time = 4.0


def run(settings: Settings, *, burst: bool = False) -> bool:
    """Work the queue until stopped (SIGTERM finishes the current job first) or, with ``burst``,
    until it is empty. Survives Redis outages: RQ's loop gives up on some Redis errors, so it is
    started again until a stop is requested."""
    rt = Runtime(settings).activate()
    handlers.load(settings.handler_modules)
    ticker = Ticker(rt.queue, rt.sweep, settings.sweep_interval)
    if burst:
        rt.sweep()
        ticker.scheduler.acquire_locks()
        ticker.scheduler.enqueue_scheduled_jobs()
    else:
        threading.Thread(target=ticker.run, name="webhooks-ticker", daemon=True).start()
    # Jobs run in this process: forking per job costs ~13 ms. A killed worker's job is found by
    # the sweeper (its row is `processing` and no transaction holds it) and run again.
    while True:
        worker = Worker([rt.queue.queue], connection=rt.queue.connection)
        try:
            result = bool(worker.work(burst=burst))
        except (redis.RedisError, OSError) as exc:
            log.warning("worker: Redis unavailable (%s)", exc.__class__.__name__)
            result = False
        # An idle worker stops without setting _stop_requested; the signal leaves this date.
        if burst or worker._stop_requested or worker._shutdown_requested_date is not None:
            return result
        try:
            log.warning("worker: RQ's loop ended on an error; starting again in 2 s")
            time.sleep(2)
        except StopRequested:  # SIGTERM while waiting: RQ's handler is still installed
            return result
