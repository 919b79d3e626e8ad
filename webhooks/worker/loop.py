"""The production worker: RQ's non-forking worker that performs each job with its runtime in
scope, the retry scheduler and the sweeper on a ticker thread, and the loop ``webhooks worker``
runs (``rq worker -w webhooks.jobs.worker.Worker`` names the same class).

The worker owns its runtime and puts it in scope around each job (``runtime.current``). Jobs are
named by dotted path (``queue.JOB``): nothing here imports ``webhooks.jobs``, which imports this.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import redis
from rq import Queue, SimpleWorker
from rq.exceptions import StopRequested
from rq.job import Job
from rq.scheduler import RQScheduler
from rq.worker import WorkerStatus

from webhooks import lanes, runtime, urls
from webhooks.configuration import settings as config
from webhooks.configuration.settings import Settings
from webhooks.forward.dispatcher import Forwarder, drain
from webhooks.queue import LANES, JobQueue
from webhooks.runtime import Runtime
from webhooks.worker import claims, handlers, job_errors, reconcile, sweeper

log = logging.getLogger("webhooks.worker")  # the name the docs and log filters know
Scope = Callable[[], AbstractContextManager[object]]  # a worker's: its runtime in scope (``Runtime.scope``)


class PromptWorker(SimpleWorker):
    """RQ's non-forking worker whose stop never waits on its command channel, and never drops a
    job it was dequeuing (``_shutdown``, ``dequeue_job_and_maintain_ttl``).

    RQ listens for its commands (``rq:pubsub:<worker>``) on a redis-py thread that waits up to
    ``sleep_time`` for a message, and for a subscription when it has none. RQ passes 60 s; at
    teardown it unsubscribes, then ``stop()`` joins the thread (redis-py 8 joins with no bound), so
    a thread that looped back between the two waited out the whole minute: one stop in 8 to 15 took
    60 s, past every platform's kill. A second's wait bounds that join; the cost is one wake-up a
    second per worker. Pinned by tests/worker/test_rq_contract.py (the race made on purpose)."""

    command_wait = 1.0  # seconds: the longest a stop waits for the command thread

    def subscribe(self) -> None:
        self.log.info("Worker %s: subscribing to channel %s", self.name, self.pubsub_channel_name)
        self.pubsub = self.connection.pubsub()
        self.pubsub.subscribe(**{self.pubsub_channel_name: self.handle_payload})
        self.pubsub_thread: Any = self.pubsub.run_in_thread(  # RQ declares it None
            sleep_time=self.command_wait, daemon=True, exception_handler=self._pubsub_exception_handler
        )

    def _shutdown(self) -> None:
        """RQ's, but an idle worker only sets the flag: RQ raised ``StopRequested`` from the signal
        handler wherever the main thread was, inside the blocking dequeue too, and a job Redis had
        just moved to the intermediate list was dropped there (its event waited a minute for the
        sweeper). The dequeue looks at the flag every ``STOP_POLL`` seconds instead."""
        if self.get_state() == WorkerStatus.BUSY:
            super()._shutdown()  # type: ignore[no-untyped-call]  # RQ's, unannotated
            return
        if self.scheduler:
            self.stop_scheduler()  # type: ignore[no-untyped-call]
        self._stop_requested = True

    def dequeue_job_and_maintain_ttl(self, timeout: int | None, max_idle_time: int | None = None) -> Any:
        if timeout is None or max_idle_time is not None:  # a burst, or RQ's own idle limit: as RQ does
            return super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)
        while not self._stop_requested:
            beat()
            found = super().dequeue_job_and_maintain_ttl(min(timeout, STOP_POLL), STOP_POLL)
            if found is not None:
                return found
        raise StopRequested


class ScopedWorker(PromptWorker):
    """RQ's non-forking worker that performs each job inside ``scope()``: jobs take plain ids and
    find the worker owner's runtime there (``runtime.current``)."""

    scope: Scope

    def perform_job(self, job: Job, queue: Queue) -> bool:
        # What the job handed to its endpoint's lane, or deferred, takes effect once RQ recorded
        # its end (``webhooks.lanes``): never racing this worker's bookkeeping of the job.
        with lanes.hosting() as handoff:
            try:
                with self.scope():
                    job_errors.starting()
                    return super().perform_job(job, queue)
            finally:
                handoff.settle()

    def handle_exception(self, job: Job, *exc_info: Any) -> None:
        # Inside perform_job's scope: a job that failed before its attempt record is counted and
        # written on its event (``webhooks.worker.job_errors``), then RQ logs it and applies its retries.
        try:
            rt: Runtime | None = runtime.current()
        except Exception:  # no runtime to record it with (a plain ``rq worker`` without REDIS_URL)
            rt = None
        # Only a failed job is asked whether RQ could import and read it: nothing on the way of one that runs.
        job_errors.failed(rt, job, job_errors.unrunnable(job), exc_info[1])
        super().handle_exception(job, *exc_info)

    def stopping(self) -> bool:
        """Whether this worker was asked to stop (a signal, or ``request_stop``), not merely idle.

        RQ keeps this in private attributes (``_stop_requested``, set by ``request_stop`` and by
        a second signal; ``_shutdown_requested_date``, set by the first): pinned by
        tests/worker/test_rq_contract.py for the supported RQ range (pyproject.toml)."""
        return bool(self._stop_requested or self._shutdown_requested_date is not None)

    def ask_to_stop(self) -> None:
        """End the work loop after the current job, as RQ's warm shutdown does, without a signal
        (RQ's ``request_stop`` is a signal handler: it also raises ``StopRequested`` when idle)."""
        self._stop_requested = True


class Worker(ScopedWorker):
    """Takes RQ's worker arguments, plus the ``runtime`` it performs jobs with; without one
    (``rq worker -w webhooks.jobs.worker.Worker``) it builds its own from the environment."""

    # RQ backs off up to 60 s between attempts to reach a lost Redis; a few seconds keeps the
    # recovery after a Redis restart short at the cost of a few more connection attempts.
    max_connection_wait_time = 4.0

    def __init__(self, queues: Any, *args: Any, runtime: Runtime | None = None, **kwargs: Any) -> None:
        super().__init__(with_lanes(queues), *args, **kwargs)
        if runtime is None:  # a plain `rq worker -w webhooks.jobs.worker.Worker`: its own, followed live
            runtime = Runtime(config.load())
            runtime.start_config()
        self.runtime = runtime
        self.scope = self.runtime.scope
        if threading.current_thread() is threading.main_thread():
            signal.signal(INTERRUPT_SIGNAL, _interrupt_job)

    def request_stop(self, signum: Any, frame: Any) -> None:
        """RQ's warm stop (SIGTERM, SIGINT): the running job may finish for
        ``WEBHOOKS_STOP_TIMEOUT`` seconds; then it is interrupted (``claims.Interrupted``, raised
        in its thread: its attempt rolled back, its event queued again for the next worker, not
        counted), and if it does not return within ``STOP_GRACE`` more the process exits (its
        claim's short lease frees the event)."""
        if self.get_state() == WorkerStatus.BUSY and threading.current_thread() is threading.main_thread():
            _arm(self, self.runtime.settings.stop_timeout)
        _stopping()
        super().request_stop(signum, frame)  # type: ignore[no-untyped-call]  # RQ's, unannotated


_asked: list[float] = []  # when this process was first asked to stop (monotonic): the window's start
BEAT = [time.monotonic()]  # when the loop last turned: the worker's /healthz (webhooks.service.worker_probe)


def beat() -> None:
    BEAT[0] = time.monotonic()


ON_STOP: list[Callable[[], None]] = []  # told at once (the forwarder leases nothing more)


def _stopping() -> None:
    if not _asked:
        _asked.append(time.monotonic())
    for told in ON_STOP:
        told()


def _window_left(timeout: float) -> float:
    """What is left of the stop's window (``WEBHOOKS_STOP_TIMEOUT`` from the first request)."""
    return timeout if not _asked else max(0.0, _asked[0] + timeout - time.monotonic())


INTERRUPT_SIGNAL = signal.SIGUSR1  # raises ``claims.Interrupted`` in the job's (the main) thread
STOP_GRACE = 5.0  # seconds an interrupted job has to unwind before the process exits
STOP_POLL = 1  # seconds an idle worker's blocking dequeue waits before it looks at its stop flag


def _interrupt_job(signum: int, frame: object) -> None:
    if claims.held() is not None:  # only inside a job's claim: never in RQ's own bookkeeping
        raise claims.Interrupted


def _arm(worker: ScopedWorker, timeout: float) -> None:
    """After ``timeout``, interrupt the main thread's job if it still runs; after ``STOP_GRACE``
    more, end the process (a call that ignores the signal cannot hold the stop past the window)."""
    main = threading.main_thread()

    def fire() -> None:
        if worker.get_state() != WorkerStatus.BUSY or not main.is_alive():
            return
        log.warning("worker: stop timeout (%gs) passed with a job running: interrupting it", timeout)
        signal.pthread_kill(main.ident or 0, INTERRUPT_SIGNAL)
        time.sleep(STOP_GRACE)
        if worker.get_state() == WorkerStatus.BUSY and main.is_alive():
            log.error("worker: the interrupted job did not return within %gs: exiting; its lease frees it", STOP_GRACE)
            os._exit(3)

    timer = threading.Timer(max(0.0, timeout), fire)
    timer.daemon = True
    timer.start()


def with_lanes(queues: Any) -> list[Any]:
    """``queues`` (names or RQ queues) each followed by its lane queue (``webhooks.queue.LANES``),
    unless named: ``rq worker -w webhooks.jobs.worker.Worker default`` takes ``default-lanes`` too,
    after ``default``."""
    items = [queues] if isinstance(queues, str | Queue) else list(queues)
    names = {q if isinstance(q, str) else q.name for q in items}
    found = list(items)
    for q in items:
        name = q if isinstance(q, str) else q.name
        if name.endswith(LANES) or name + LANES in names:
            continue
        found.append(
            name + LANES
            if isinstance(q, str)
            else Queue(name + LANES, connection=q.connection, serializer=q.serializer)
        )
    return found


def unreachable(url: str, within: float = 3.0, now: Callable[[], float] = time.monotonic) -> str | None:
    """None once Redis at ``url`` answers a PING, tried for ``within`` seconds (a Redis started
    beside the worker); else one line naming its address, never its password. For the first
    start only: an outage later is ridden out by ``run``."""
    from webhooks.queue import connect

    client = connect(url)
    deadline = now() + within
    try:
        while True:
            try:
                client.ping()
                return None
            except (redis.RedisError, OSError) as exc:
                if now() >= deadline:
                    detail = str(exc).splitlines()[0][:200] if str(exc) else exc.__class__.__name__
                    return f"cannot reach Redis at {urls.redis_address(url)} ({detail})"
            time.sleep(0.5)  # the next try, not an ordering of events
    finally:
        client.close()


def run(settings: Settings, *, burst: bool = False, started: Callable[[Runtime], Any] | None = None) -> bool:
    """Work the queue until stopped (SIGTERM lets the current job finish within
    ``WEBHOOKS_STOP_TIMEOUT``, then interrupts it) or, with ``burst``,
    until it is empty. Survives Redis outages: RQ's loop gives up on some Redis errors, so it is
    started again until a stop is requested."""
    # Every import before the stop handler: a SIGTERM raising inside an import can be swallowed
    # (psycopg tries its implementations under ``except Exception``), and the worker would not stop.
    _asked.clear()  # this run's window starts at its own stop
    rt = Runtime(settings)
    rt.start_config()
    if started is not None:  # `webhooks worker`'s probe listener (WEBHOOKS_WORKER_PORT)
        started(rt)
    handlers.load(settings.handler_modules)
    handlers.announce(settings.handler_modules)
    ticker = Ticker(rt.queue, tick(rt), settings.sweep_interval)
    thread = threading.Thread(target=ticker.run, name="webhooks-ticker", daemon=True)
    # Forwarding runs beside the jobs, on threads of its own (``webhooks.forward.dispatcher``).
    # Always: a destination may be created at runtime (the forwarder follows ``rt.settings``).
    forwarder: Forwarder | None = Forwarder(rt.sessions, lambda: rt.settings.destinations)
    stop = _Stop()
    stop.install()  # until RQ installs its own: a SIGTERM while it starts is a clean stop too
    try:
        if burst:
            sweeper.sweep(rt)
            ticker.scheduler.acquire_locks()
            ticker.scheduler.enqueue_scheduled_jobs()
        else:
            thread.start()
            if forwarder is not None:
                forwarder.start()
                ON_STOP.append(forwarder.halt)
        # Jobs run in this process: forking per job costs ~13 ms. A killed worker's job is found by
        # the sweeper (its row is `processing` and no transaction holds it) and run again.
        with rt.store.keep():  # one connection for this loop's events, not one per event
            done = _work(rt, burst, stop)
            # A burst ends once the lanes finished what the jobs handed them; a stop lets the
            # running provider calls end (bounded), and leaves the waiting ones to the sweeper.
            rt.lanes.drain(timeout=60 if burst else min(20.0, settings.stop_timeout), drop=not burst)
        if burst and forwarder is not None:  # a burst sends what is due, too
            drain(forwarder)
        return done
    except StopRequested:  # SIGTERM before RQ's handler was installed (or while waiting to restart it)
        return False
    finally:  # a clean stop leaves RQ's scheduler lock to the next worker (Ticker.release)
        if forwarder is not None:
            # Sends under way share the stop's window with the job; past it they are interrupted.
            forwarder.stop(timeout=_window_left(settings.stop_timeout) if not burst else 10.0)
            if forwarder.halt in ON_STOP:
                ON_STOP.remove(forwarder.halt)
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
            worker = Worker(rt.queue.queues, connection=rt.queue.connection, runtime=rt)
            result = bool(worker.work(burst=burst))
        except (redis.RedisError, OSError) as exc:
            log.warning("worker: Redis unavailable (%s); retrying in 2 s", exc.__class__.__name__)
            beat()  # waiting for Redis is not a stall: a restart would not bring it back
            result = False
        # An idle worker stops without a stop request; a signal leaves one.
        if burst or stop.requested or (worker is not None and worker.stopping()):
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
        _stopping()
        raise StopRequested


class Ticker:
    """Moves due retries from the scheduled registry to the queue and runs a periodic task.

    Holds RQ's scheduler lock for the queue, so several tickers never enqueue one job twice.
    """

    def __init__(self, queue: JobQueue, task: Callable[[], Any] | None, interval: float) -> None:
        # RQ sets its logger's level to INFO unless told: keep the level the process chose.
        level = logging.getLogger("rq.scheduler").getEffectiveLevel()
        self.scheduler = RQScheduler(queue.queues, connection=queue.connection, interval=1, logging_level=level)
        self.task, self.interval = task, interval
        self.stopped = threading.Event()

    def run(self) -> None:
        next_task = 0.0
        elapsed = 0.0
        while not self.stopped.is_set():
            try:
                if not self.scheduler.acquired_locks:
                    self.scheduler.acquire_locks()
                else:
                    self.scheduler.heartbeat()
                if self.scheduler.acquired_locks:
                    self.scheduler.enqueue_scheduled_jobs()
                if self.task is not None and elapsed >= next_task:
                    next_task = elapsed + self.interval
                    self.task()
            except Exception as exc:  # a tick must never kill the thread; the next one retries
                log.warning("ticker: tick failed (%s: %s)", exc.__class__.__name__, str(exc)[:200])
                log.debug("ticker: tick failed", exc_info=True)
            self.stopped.wait(1)
            elapsed += 1
        self.release()

    def release(self) -> None:
        """Give up RQ's scheduler lock: the next worker moves due retries at once, not when the
        lock's minute runs out (a retry waited 44 s after a restart)."""
        try:
            self.scheduler.release_locks()
        except Exception as exc:  # Redis gone: the lock expires on its own
            log.warning("ticker: could not release the scheduler lock (%s)", exc.__class__.__name__)
