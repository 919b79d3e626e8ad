"""The forwarder: one thread per worker process that leases due deliveries and sends them.

Each destination has its own lane: a pool of ``max_in_flight`` sending threads and one publisher
of its kind (``webhooks.forward.kinds``: an HTTP client, a bus's producer), so a destination that
hangs holds up only its own lane, never another destination nor the
forwarder's loop (which never waits on the network). The loop leases what a lane has room for
(``webhooks.forward.deliveries.lease``: the database decides what is due, in order, within the
destination's rate and concurrency, service-wide), hands each lease to the lane, and settles the
results in one transaction per destination and turn. A database outage pauses the loop (the
results wait in memory; leases that expire meanwhile are sent again under the same
``webhook-id``); nothing is lost.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from webhooks import metrics, tracing
from webhooks.configuration.destinations import Destination
from webhooks.forward import deliveries, settle
from webhooks.forward.leases import Lease, Result
from webhooks.guard import Resolver, system_resolver
from webhooks.vocabulary import Outcome

from . import kinds, signing
from .kinds import retry_after

log = logging.getLogger(__name__)
IDLE_SECONDS = 0.5  # the longest the loop sleeps when nothing wakes it
_wake = threading.Event()  # set when this process created deliveries (``nudge``)


def nudge() -> None:
    """Tell this process's forwarder new deliveries exist (it also looks every ``IDLE_SECONDS``)."""
    _wake.set()


class Lane:
    """One destination's sending threads and its kind's publisher (``webhooks.forward.kinds``)."""

    def __init__(self, destination: Destination, done: Callable[[Result], None], resolver: Resolver) -> None:
        self.destination, self.done = destination, done
        self.publisher = kinds.publisher(destination, resolver)
        self.pool = ThreadPoolExecutor(destination.max_in_flight, thread_name_prefix=f"forward-{destination.name}")
        self.busy = 0  # leases handed to the pool and not yet settled
        self.flying: dict[int, tuple[Lease, datetime]] = {}  # sends under way: what a stop interrupts
        self.keys = destination.keys

    @property
    def free(self) -> int:
        return self.destination.max_in_flight - self.busy

    def send(self, lease: Lease) -> None:
        self.busy += 1
        self.flying[id(lease)] = (lease, datetime.now(UTC))
        self.pool.submit(self._send, lease)

    def _send(self, lease: Lease) -> None:
        try:
            self._traced(lease)
        finally:
            self.flying.pop(id(lease), None)

    def _traced(self, lease: Lease) -> None:
        with (
            tracing.linked(lease.traceparent),
            tracing.span(
                "forward",
                destination=self.destination.name,
                destination_kind=self.destination.kind,
                endpoint=lease.endpoint,
                event_id=lease.event_id,
                attempt=lease.attempts + 1,
            ) as traced,
        ):
            result = self._publish(lease)
            traced.set("outcome", Outcome.DELIVERED if result.delivered else Outcome.ERROR)
            traced.set("status_code", result.status)
        self.done(result)

    def _publish(self, lease: Lease) -> Result:
        started_at, clock = datetime.now(UTC), time.monotonic()
        timestamp = int(time.time())
        headers = signing.headers(self.keys, lease.message, timestamp, lease.body)
        carried = tracing.traceparent()  # the forward span's: HTTP header, or a bus message's header
        if carried is not None:
            headers["traceparent"] = carried
        try:
            return self.publisher.publish(lease, headers, started_at)
        except Exception as exc:  # a bug must not lose the lease's result: settled as an error
            log.exception("forward: sending to %s failed", self.destination.name)
            return Result(lease, started_at, time.monotonic() - clock, None, f"{exc.__class__.__name__}")

    def close(self, wait: bool) -> None:
        self.pool.shutdown(wait=wait, cancel_futures=False)
        self.publisher.close()


class Forwarder:
    """Leases, sends and settles deliveries for every configured destination."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        destinations: Mapping[str, Destination] | Callable[[], Mapping[str, Destination]],
        *,
        resolver: Resolver = system_resolver,
    ) -> None:
        """``destinations``, or a function returning the current ones (the runtime's snapshot,
        which the admin API changes: each turn opens, replaces and retires lanes to match)."""
        self.sessions = sessions
        self.results: queue.SimpleQueue[Result] = queue.SimpleQueue()
        self._current = destinations if callable(destinations) else lambda: destinations
        self._resolver = resolver
        self.lanes: dict[str, Lane] = {}
        self._retired: dict[str, Lane] = {}  # lanes of destinations changed or gone, until their sends settle
        self._sync()
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None
        self._unsettled: dict[str, list[Result]] = {}

    def _sync(self) -> None:
        """Lanes for the current destinations. A changed or removed destination's lane is retired:
        it takes no new lease, its sends in flight finish (then its client closes) and settle,
        counted on the lane that replaces it, or on the retired lane until they have."""
        current = self._current()
        if current.keys() == self.lanes.keys() and all(
            current[n] is lane.destination for n, lane in self.lanes.items()
        ):
            return
        for name, lane in list(self.lanes.items()):
            if current.get(name) == lane.destination:
                lane.destination = current[name]  # an equal snapshot's object: keep the lane
                continue
            del self.lanes[name]
            threading.Thread(target=_retire, args=(lane,), name=f"forward-{name}-retired", daemon=True).start()
            self._retired[name] = lane
        for name, destination in current.items():
            if name not in self.lanes:
                self.lanes[name] = Lane(destination, self._done, self._resolver)
                old = self._retired.pop(name, None)
                self.lanes[name].busy += old.busy if old is not None else 0
        for name, lane in list(self._retired.items()):
            if not lane.busy:
                del self._retired[name]

    def _done(self, result: Result) -> None:
        self.results.put(result)
        _wake.set()

    def start(self) -> Forwarder:
        self.thread = threading.Thread(target=self.run, name="webhooks-forwarder", daemon=True)
        self.thread.start()
        return self

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                busy = self.step()
            except SQLAlchemyError as exc:
                log.warning("forwarder: database unavailable (%s); retrying", exc.__class__.__name__)
                busy = False
                self.stopped.wait(1)
            except Exception:  # the loop must never die; the next turn retries
                log.exception("forwarder: turn failed")
                busy = False
                self.stopped.wait(1)
            if not busy:
                _wake.wait(IDLE_SECONDS)
            _wake.clear()

    def step(self) -> bool:
        """One turn: settle what came back, lease what each lane has room for; whether it did
        anything (a busy loop turns again at once)."""
        worked = self.settle()
        self._sync()
        now = datetime.now(UTC)
        for lane in self.lanes.values():
            if lane.free <= 0:
                continue
            for lease in deliveries.lease(self.sessions, lane.destination, lane.free, now):
                lane.send(lease)
                worked = True
        return worked

    def settle(self) -> bool:
        while True:
            try:
                result = self.results.get_nowait()
            except queue.Empty:
                break
            self._unsettled.setdefault(result.lease.destination, []).append(result)
        worked = False
        for name, results in list(self._unsettled.items()):
            lane = self.lanes.get(name) or self._retired[name]
            outcomes = settle.settle(self.sessions, lane.destination, results, datetime.now(UTC))
            del self._unsettled[name]
            lane.busy -= len(results)
            for result, outcome in zip(results, outcomes, strict=True):
                if outcome is not None:
                    metrics.forwarded(name, outcome, result.seconds)
            worked = True
        return worked

    def halt(self) -> None:
        """Lease nothing more (a stop was asked for); what is in flight goes on until ``stop``."""
        self.stopped.set()
        _wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop leasing, let requests in flight finish (up to ``timeout``: what is left of the
        stop's window), settle them; a send still under way then is interrupted: its delivery
        released at once (``settle.interrupt``: due again, no attempt spent), so the next worker
        sends it without waiting for its lease to end."""
        deadline = time.monotonic() + max(0.0, timeout)
        self.halt()
        if self.thread is not None:
            self.thread.join(max(0.0, deadline - time.monotonic()))
        lanes = [*self.lanes.values(), *self._retired.values()]
        while any(lane.busy for lane in lanes) and time.monotonic() < deadline:
            try:
                self.settle()
            except SQLAlchemyError:
                break  # their leases expire: sent again by the next forwarder
            time.sleep(0.02)
        flying = [sent for lane in lanes for sent in list(lane.flying.values())]
        if flying:
            log.warning("forwarder: %d send(s) still under way at the stop timeout: interrupting them", len(flying))
            try:
                self.settle()  # what came back meanwhile first
                settle.interrupt(self.sessions, flying, datetime.now(UTC))
            except SQLAlchemyError:
                log.warning("forwarder: could not release the interrupted sends; their leases expire")
        for lane in lanes:
            lane.close(wait=False)


def _retire(lane: Lane) -> None:
    """A retired lane's end: its sends in flight finish, then its client closes."""
    lane.pool.shutdown(wait=True, cancel_futures=False)
    lane.publisher.close()


def drain(forwarder: Forwarder, timeout: float = 10.0) -> bool:
    """Turn ``forwarder``'s loop in this thread until nothing is in flight and nothing is due
    (waiting out a rate limit or a throttle; not a retry's backoff, nor a paused destination's
    deliveries, nor an open circuit's before its probe), or ``timeout`` passed; whether it got
    there (tests, ``webhooks worker --burst``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        idle = not forwarder.step() and not any(lane.busy for lane in forwarder.lanes.values())
        ours = [lane.destination for lane in forwarder.lanes.values()]
        if idle and not deliveries.due(forwarder.sessions, ours, datetime.now(UTC)):
            return True
        _wake.wait(0.05)
        _wake.clear()
    return False


__all__ = ["Forwarder", "drain", "nudge", "retry_after"]
