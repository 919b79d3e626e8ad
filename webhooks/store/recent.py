"""The events this process has lately seen in the database: a duplicate of one needs no round trip.

A key goes in only once the database has it: a batch's insert committed it, or found it there
(stored, or purged and tombstoned). A delivery whose every key is here, verified like any other
first, is answered as a duplicate without asking the database (a quarter of a duplicate's CPU was
its insert that found the row, and its round trip held a thread).

Why that is safe: an event key, once in the database, stays a duplicate until its tombstone
expires (``webhooks.store.purge``: a year by default, never shorter than the events' own windows). A key
is trusted for ``TTL_SECONDS`` after the database last said so (a cache hit does not extend it), so
at worst a delivery arriving within that long after its tombstone expired is answered as the
duplicate it was a moment before. This process's ``expire_tombstones`` forgets every key at once.
Nothing of an event can be lost: a key not here goes to the database as before, and no key is
added before its commit. (A failover to a standby that had not received a commit loses that event
whatever this does; within ``TTL_SECONDS`` its retry would be answered from here, not stored.)

Bounded: at most ``MAX_KEYS`` keys (≈ 240 bytes each with a Stripe-sized id: 12 MB), the oldest
dropped first.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable

from webhooks.store.base import Key

MAX_KEYS = 50_000
TTL_SECONDS = 60.0
_every: weakref.WeakSet[Recent] = weakref.WeakSet()


class Recent:
    """Keys the database confirmed lately, each until ``ttl`` seconds after its confirmation."""

    def __init__(
        self, max_keys: int = MAX_KEYS, ttl: float = TTL_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_keys, self.ttl, self.clock = max_keys, ttl, clock
        self._lock = threading.Lock()
        self._until: OrderedDict[Key, float] = OrderedDict()  # confirmation order: oldest first
        _every.add(self)

    def add(self, keys: Iterable[Key]) -> None:
        """The database holds these keys (just committed, or found there by an insert)."""
        until = self.clock() + self.ttl
        with self._lock:
            for key in keys:
                self._until[key] = until
                self._until.move_to_end(key)
            while len(self._until) > self.max_keys:
                self._until.popitem(last=False)

    def holds(self, keys: Iterable[Key]) -> bool:
        """Whether every one of ``keys`` (at least one) was confirmed within the last ``ttl`` seconds."""
        now, some = self.clock(), False
        with self._lock:
            for key in keys:
                until = self._until.get(key)
                if until is None:
                    return False
                if until <= now:
                    del self._until[key]
                    return False
                some = True
        return some

    def forget(self) -> None:
        with self._lock:
            self._until.clear()

    def __len__(self) -> int:
        return len(self._until)


def forget_everywhere() -> None:
    """Forget every key of every cache of this process (tombstones expired: ids may be new again)."""
    for recent in list(_every):
        recent.forget()
