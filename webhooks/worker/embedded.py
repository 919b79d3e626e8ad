"""The embedded worker (``webhooks serve``, tests): RQ's non-forking worker on a thread of this
process, the scheduler/sweeper ticker, and a watchdog for a job stuck past its timeout.

RQ's timer interrupts a job's thread only while it runs Python code: a handler blocked in a sleep
or a socket read without timeout ignores it, and with one worker thread every other event waits.
The watchdog looks at the running job every ``WATCH_INTERVAL`` seconds; one past its timeout by
``GRACE`` (the timer had its chance) is given up: ``on_stuck(thread, timeout)`` settles its
database side (``webhooks.worker.claims.abandon``), RQ fails the job as timed out when that recorded the
attempt (so its retry policy applies), and a fresh worker thread takes the queue. A thread cannot
be killed: the stuck one ends when its call returns, taking no other job, and leaves alone an RQ
job the watchdog failed.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rq import Queue
from rq.job import Job
from rq.registry import StartedJobRegistry
from rq.timeouts import TimerDeathPenalty
from rq.utils import now
from rq.worker import BaseWorker

from webhooks.forward.dispatcher import Forwarder
from webhooks.queue import JobQueue
from webhooks.runtime import Runtime
from webhooks.worker import claims
from webhooks.worker.loop import Scope, ScopedWorker, Ticker, tick

log = logging.getLogger("webhooks.embedded")  # the name the docs and log filters know
WATCH_INTERVAL = 0.5  # seconds between the watchdog's looks
GRACE = 1.0  # seconds past a job's timeout before it counts as stuck
OnStuck = Callable[[int, float], bool]  # (thread ident, timeout) → whether the attempt was recorded


@dataclass(frozen=True)
class Running:
    """The job a worker thread runs, since when (``time.monotonic``), and its timeout (None: none)."""

    job: Job
    queue: Queue
    thread: int
    since: float
    timeout: float | None


class ThreadWorker(ScopedWorker):
    """A ``ScopedWorker`` usable off the main thread: no signals, a timer for timeouts; it shows the
    watchdog its running job, and once the watchdog failed that job it leaves the job's RQ record
    alone."""

    death_penalty_class = TimerDeathPenalty

    def __init__(self, queue: JobQueue, scope: Scope) -> None:
        super().__init__(queue.queues, connection=queue.connection)
        self.scope = scope
        self.running: Running | None = None
        self.settled = False  # the watchdog failed the running job in RQ
        self._settling = threading.Lock()  # the watchdog's failing vs. this thread's own bookkeeping

    def _install_signal_handlers(self) -> None:
        pass

    def perform_job(self, job: Job, queue: Queue) -> bool:
        timeout = job.timeout or queue.DEFAULT_TIMEOUT
        self.running = Running(
            job, queue, threading.get_ident(), time.monotonic(), None if timeout == -1 else float(timeout)
        )
        try:
            return super().perform_job(job, queue)
        finally:
            self.running = None

    def handle_execution_ended(self, job: Job, queue: Queue, heartbeat_ttl: int) -> None:
        if not self.settled:  # a late write would recreate an expired job's hash
            super().handle_execution_ended(job, queue, heartbeat_ttl)

    def handle_exception(self, job: Job, *exc_info: Any) -> None:
        if not self.settled:
            super().handle_exception(job, *exc_info)

    def handle_job_success(self, job: Job, queue: Queue, started_job_registry: StartedJobRegistry) -> None:
        with self._settling:
            if not self.settled:
                super().handle_job_success(job, queue, started_job_registry)

    def handle_job_failure(
        self, job: Job, queue: Queue, started_job_registry: Any = None, exc_string: str = ""
    ) -> None:
        with self._settling:
            if not self.settled:
                super().handle_job_failure(job, queue, started_job_registry, exc_string)

    def give_up(self, running: Running, on_stuck: OnStuck | None) -> bool | None:
        """Stop this worker after its job, and fail the job in RQ if ``on_stuck`` recorded its
        attempt; returns whether it did, or None when the job ended meanwhile (nothing done)."""
        with self._settling:  # this thread's own bookkeeping waits, so ``running`` cannot end here
            if self.running is not running:
                return None
            self.ask_to_stop()  # its loop ends when the stuck job returns
            if on_stuck is None:
                return False
            assert running.timeout is not None  # only a job with a timeout is stuck
            if not on_stuck(running.thread, running.timeout):
                return False
            self.settled = True
            running.job.ended_at = now()
            message = f"JobTimeoutException: Task exceeded maximum timeout value ({running.timeout:g} seconds)"
            BaseWorker.handle_job_failure(self, running.job, running.queue, exc_string=message)
            return True


class EmbeddedWorker:
    """A ``ThreadWorker``, a ``Ticker`` and the watchdog on daemon threads."""

    def __init__(
        self,
        queue: JobQueue,
        scope: Scope,
        on_tick: Callable[[], Any] | None,
        on_stuck: OnStuck | None = None,
        forwarder: Forwarder | None = None,
    ) -> None:
        self.queue, self.scope, self.on_stuck, self.forwarder = queue, scope, on_stuck, forwarder
        self.worker = ThreadWorker(queue, scope)
        self.thread = threading.Thread(target=self.worker.work, name="webhooks-worker", daemon=True)
        self.ticker = Ticker(queue, on_tick, queue.settings.sweep_interval)
        self.stopped = threading.Event()

    def start(self) -> None:
        self.thread.start()
        if self.forwarder is not None:
            self.forwarder.start()
        for name, target in (("webhooks-ticker", self.ticker.run), ("webhooks-watchdog", self.watch)):
            threading.Thread(target=target, name=name, daemon=True).start()

    def watch(self) -> None:
        while not self.stopped.wait(WATCH_INTERVAL):
            try:
                self.check(time.monotonic())
            except Exception as exc:  # the watchdog must never die; the next look retries
                log.warning("watchdog: check failed (%s: %s)", exc.__class__.__name__, str(exc)[:200])
                log.debug("watchdog: check failed", exc_info=True)

    def check(self, clock: float) -> None:
        """Give up on the running job if it is stuck past its timeout, and start a fresh worker."""
        running = self.worker.running
        if running is None or running.timeout is None or clock - running.since < running.timeout + GRACE:
            return
        failed = self.worker.give_up(running, self.on_stuck)
        if failed is None:
            return
        self.thread.name = "webhooks-worker-abandoned"  # ends when its call returns
        log.warning(
            "watchdog: job %s ran past its %g s timeout in a call that cannot be interrupted; %s,"
            " a fresh worker thread takes the queue",
            running.job.id,
            running.timeout,
            "failed as timed out" if failed else "left to finish",
        )
        self.worker = ThreadWorker(self.queue, self.scope)
        self.thread = threading.Thread(target=self.worker.work, name="webhooks-worker", daemon=True)
        self.thread.start()


def start_embedded(rt: Runtime) -> None:
    """Work ``rt``'s queue on threads of this process (the embedded queue: no Redis server), unless
    they run already. A job stuck past its timeout is given up (``abandon``)."""

    def build() -> EmbeddedWorker:
        forwarder = Forwarder(rt.sessions, lambda: rt.settings.destinations)  # follows the live snapshot
        return EmbeddedWorker(rt.queue, rt.scope, tick(rt), functools.partial(abandon, rt), forwarder)

    rt.queue.start_embedded(build)


def abandon(rt: Runtime, thread: int, timeout: float) -> bool:
    """Settle the database side of the job ``thread`` runs, stuck past ``timeout`` seconds; True
    when its attempt was recorded as timed out (``webhooks.worker.claims.abandon``)."""
    return claims.abandon(rt, thread, timeout)
