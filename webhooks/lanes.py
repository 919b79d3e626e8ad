"""Per-endpoint lanes: an event whose processing calls its provider's API runs on its endpoint's
own threads, never on the worker that every endpoint shares.

A worker (``webhooks.worker.loop.ScopedWorker``: ``webhooks worker``, the embedded worker of ``webhooks
serve``) hosts each job it performs (``hosting``). The job of an event whose kind calls out for
its endpoint (``Provider.calls_out``) asks ``hand``: the endpoint's lane takes it (at most ``CAP``
running and ``BACKLOG`` waiting) and the job returns at once, or the lane is full and the job is
deferred (run again later by RQ's scheduler, the delay growing with what already waits). Either
happens only once RQ has recorded the job's end (``Handoff.settle``), so the lane's own retry or
deferral never races the worker's bookkeeping. A budget's wait (``providers.api.throttle``) and a
hung or slow provider call hold only that endpoint's lane: other endpoints' events keep flowing,
with one worker.

Such jobs wait on their own queue (``webhooks.queue.LANES``), which our workers take only when the
main queue is empty: handing a flood on to its lane costs the shared worker no time that another
endpoint's events wait for.

Nothing is lost: a deferred job is a scheduled RQ job (live, so the sweeper leaves its ``queued``
row alone); a lane's waiting events are ``queued`` rows and running ones ``processing`` rows, and
a process that dies with them leaves them to the sweeper. A plain RQ worker (``rq worker`` without
``-w``, the tests' ``drain``) hosts nothing: the job runs inline as before.

``heartbeat``: a callable ``hand`` may be given is called every ``HEARTBEAT_SECONDS`` while its
task runs (for a claim's lease to be renewed during a long provider call).
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

log = logging.getLogger(__name__)
CAP = 2  # threads a lane runs at once: a hung call holds at most these
# Events a lane holds waiting (their rows are `queued`; a process that dies with them leaves them
# to the sweeper). Beyond, jobs are deferred to RQ's scheduler. Holding them here costs the shared
# worker one cheap job per event; each deferral cost it another job run (measured: a flood of 200
# nudges cycling through the scheduler delayed another endpoint's events by 17 s).
BACKLOG = 10_000
DEFER_MIN, DEFER_MAX = 1.0, 60.0  # seconds a deferred job waits, growing with the lane's deferrals
HEARTBEAT_SECONDS = 5.0

Task = Callable[[], object]
Defer = Callable[[float], object]  # reschedules the job in that many seconds


@dataclass
class _Running:
    heartbeat: Callable[[], object] | None
    beat: float = field(default_factory=time.monotonic)


class Lane:
    """One endpoint's threads (up to ``cap``) and its bounded backlog of ``backlog`` tasks."""

    def __init__(self, name: str, cap: int = CAP, backlog: int = BACKLOG) -> None:
        self.name, self.cap, self.backlog = name, cap, backlog
        self.lock = threading.Condition()
        self.waiting: deque[tuple[str, Task, Callable[[], object] | None]] = deque()
        self.keys: set[str] = set()  # the events reserved, waiting or running here
        self.reserved = 0  # handed but not started yet (their job's end not recorded yet)
        self.threads = 0
        self.running: dict[int, _Running] = {}
        self.deferred: set[str] = set()  # ids deferred and not back yet: how long the next waits
        self.seconds = 0.1  # running mean of a task's time (paces deferrals)

    def reserve(self, key: str) -> str:
        """``reserved``, ``here`` (this event is reserved, waiting or running here already: a second
        job of it, a replay or the sweeper's, adds nothing) or ``full``."""
        with self.lock:
            if key in self.keys:
                return "here"
            if len(self.waiting) + self.reserved + len(self.running) >= self.cap + self.backlog:
                return "full"
            self.reserved += 1
            self.keys.add(key)
            return "reserved"

    def start(self, key: str, task: Task | None, heartbeat: Callable[[], object] | None = None) -> None:
        """Run a reserved ``task`` (None: give the reservation back)."""
        with self.lock:
            self.reserved -= 1
            if task is None:
                self.keys.discard(key)
                return
            self.waiting.append((key, task, heartbeat))
            if self.threads < self.cap:
                self.threads += 1
                threading.Thread(target=self._run, name=f"webhooks-lane-{self.name}", daemon=True).start()
            self.lock.notify()

    def delay(self, key: str) -> float:
        """Seconds until a deferred job of ``key`` comes back: the lane's queue ahead of it, paced
        by its tasks' time, jittered so deferred jobs do not come back together."""
        with self.lock:
            if len(self.deferred) < 100_000:
                self.deferred.add(key)
            ahead = len(self.deferred) + len(self.waiting) + len(self.running)
            seconds = ahead * self.seconds / self.cap
        return min(DEFER_MAX, max(DEFER_MIN, seconds)) * random.uniform(1.0, 1.5)

    def back(self, key: str) -> None:
        with self.lock:
            self.deferred.discard(key)

    def _run(self) -> None:
        me = threading.get_ident()
        while True:
            with self.lock:
                if not self.waiting:
                    self.threads -= 1
                    self.lock.notify_all()
                    return
                key, task, heartbeat = self.waiting.popleft()
                self.running[me] = _Running(heartbeat)
            began = time.monotonic()
            try:
                task()
            except Exception as exc:  # a task records its own errors; the lane must not die
                log.warning("lane %s: task failed (%s: %s)", self.name, exc.__class__.__name__, str(exc)[:200])
            finally:
                with self.lock:
                    del self.running[me]
                    self.keys.discard(key)
                    self.seconds = 0.8 * self.seconds + 0.2 * (time.monotonic() - began)
                    self.lock.notify_all()

    def beat(self, now: float) -> None:
        with self.lock:
            due = [r for r in self.running.values() if r.heartbeat is not None and now - r.beat >= HEARTBEAT_SECONDS]
            for r in due:
                r.beat = now
        for r in due:
            try:
                assert r.heartbeat is not None
                r.heartbeat()
            except Exception as exc:
                log.warning("lane %s: heartbeat failed (%s)", self.name, exc.__class__.__name__)

    def idle(self) -> bool:
        with self.lock:
            return not (self.waiting or self.running or self.reserved)


class Lanes:
    """The lanes of one runtime, by endpoint name, and the thread that calls their heartbeats."""

    def __init__(self) -> None:
        self.lanes: dict[str, Lane] = {}
        self.lock = threading.Lock()
        self.beating = False

    def lane(self, endpoint: str) -> Lane:
        with self.lock:
            found = self.lanes.get(endpoint)
            if found is None:
                found = self.lanes[endpoint] = Lane(endpoint, CAP, BACKLOG)
            if not self.beating:
                self.beating = True
                threading.Thread(target=self._beat, name="webhooks-lane-heartbeat", daemon=True).start()
            return found

    def _beat(self) -> None:
        while True:
            time.sleep(1.0)  # a ticker's period, not an ordering of events
            with self.lock:
                lanes = list(self.lanes.values())
            for lane in lanes:
                lane.beat(time.monotonic())

    def drain(self, timeout: float = 60.0, *, drop: bool = False) -> bool:
        """Wait (up to ``timeout`` s) until no lane has a task; whether they all ended. ``drop``
        (a worker stopping): the waiting tasks are not run, only the running ones awaited (their
        rows stay `queued`: the sweeper queues them again)."""
        deadline = time.monotonic() + timeout
        with self.lock:
            lanes = list(self.lanes.values())
        for lane in lanes:
            with lane.lock:
                if drop:
                    for key, _, _ in lane.waiting:
                        lane.keys.discard(key)
                    lane.waiting.clear()
                while lane.waiting or lane.running or lane.reserved:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    lane.lock.wait(left)
        return True


@dataclass
class Handoff:
    """What the job a worker performs handed on, done once RQ recorded the job's end."""

    lane: Lane | None = None
    key: str = ""
    task: Task | None = None
    heartbeat: Callable[[], object] | None = None
    defer: Defer | None = None
    seconds: float = 0.0

    def settle(self) -> None:
        if self.lane is not None:
            self.lane.start(self.key, self.task, self.heartbeat)
        elif self.defer is not None:
            try:
                self.defer(self.seconds)
            except Exception as exc:  # Redis gone: the `queued` row is the sweeper's
                log.warning("lanes: could not defer a job (%s: %s)", exc.__class__.__name__, str(exc)[:200])


_hosting: ContextVar[Handoff | None] = ContextVar("webhooks_lane_handoff", default=None)


@contextlib.contextmanager
def hosting() -> Iterator[Handoff]:
    """Around a job a worker performs: what it hands on is settled after the block (``settle``)."""
    handoff = Handoff()
    token = _hosting.set(handoff)
    try:
        yield handoff
    finally:
        _hosting.reset(token)


def after(action: Callable[[], object]) -> None:
    """Run ``action`` once the hosting worker recorded the running job's end (now, unhosted): a
    job that queues its own event again must not race RQ's bookkeeping of itself."""
    handoff = _hosting.get()
    if handoff is None:
        action()
        return
    handoff.defer, handoff.seconds = (lambda _seconds: action()), 0.0


def hosted() -> bool:
    """Whether the job running here may hand its work on (a worker hosts it)."""
    return _hosting.get() is not None


def hand(
    lanes: Lanes, endpoint: str, key: str, task: Task, defer: Defer, heartbeat: Callable[[], object] | None = None
) -> str:
    """Hand ``task`` (the event ``key``'s processing) to ``endpoint``'s lane: ``handed``; ``here``
    when the lane has it already; ``deferred`` (the job runs again later) when the lane is full.
    What is handed or deferred takes effect once the hosting worker recorded the job's end."""
    handoff = _hosting.get()
    assert handoff is not None and handoff.lane is None and handoff.defer is None, "one hand-off per hosted job"
    lane = lanes.lane(endpoint)
    lane.back(key)
    found = lane.reserve(key)
    if found == "reserved":
        handoff.lane, handoff.key, handoff.task, handoff.heartbeat = lane, key, task, heartbeat
        return "handed"
    if found == "here":
        return "here"
    handoff.defer, handoff.seconds = defer, lane.delay(key)
    return "deferred"
