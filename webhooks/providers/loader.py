"""The bounded caching loader behind every key and certificate a provider's signature needs from the
network: PayPal's and SNS's certificates (``paypal_certs``, ``sns_certs``), Plaid's keys
(``plaid_keys``). A sender chooses what is fetched (a certificate URL, a key id), so what it may
make us fetch is capped before the fetch:

- a good value is cached until it expires (its own expiry: a certificate's ``not_valid_after``, a
  key's time to live); at most ``MAX_KEPT`` values are kept, the oldest forgotten first;
- a key is fetched at most once per ``failure_ttl`` seconds: a failure is remembered and raised
  again without a fetch, and concurrent requests for one uncached key share one fetch;
- a sender (``clients.sender``) gets at most ``per_sender`` fetches of new keys per ``per_seconds``,
  and all senders together at most ``max_fetches`` (beyond either: ``UnavailableError``, a 503 the
  provider retries). Junk therefore spends its own sender's budget, never a genuine key's.

``clock`` is injectable for tests. Thread-safe.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from webhooks.errors import UnavailableError, VerificationError
from webhooks.vocabulary import Reason

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
T = TypeVar("T")
MAX_SENDERS = 10_000  # senders whose recent fetches are remembered (the least recent forgotten first)
MAX_KEPT = 10_000  # good values and remembered failures kept, each (the oldest forgotten first)


class BoundedLoader(Generic[K, V]):
    """``load(key, sender, fetch)``: the cached value of ``key``, or ``fetch()``'s within the budgets."""

    def __init__(
        self,
        name: str,
        *,
        timeout: float,
        clock: Callable[[], float] = time.monotonic,
        failure_ttl: float = 60.0,
        max_fetches: int = 120,
        per_seconds: float = 60.0,
        per_sender: int = 10,
    ) -> None:
        self.name, self.timeout, self.clock = name, timeout, clock
        self.failure_ttl, self.max_fetches, self.per_seconds, self.per_sender = (
            failure_ttl,
            max_fetches,
            per_seconds,
            per_sender,
        )
        self._cache: OrderedDict[K, tuple[V, float]] = OrderedDict()  # key -> (value, until)
        self._failures: OrderedDict[K, tuple[Reason | None, str, float]] = OrderedDict()  # (reason, detail, until)
        self._fetches: deque[float] = deque()  # clock() of recent fetches
        self._by_sender: dict[str, deque[float]] = {}  # sender -> its recent fetches, oldest sender first
        self._pending: dict[K, threading.Event] = {}  # key -> set when its one fetch is done
        self._lock = threading.Lock()

    def load(self, key: K, sender: str, fetch: Callable[[], tuple[V, float]]) -> V:
        """``key``'s value; ``fetch()`` returns (a checked value, seconds it stays good) or raises
        ``UnavailableError`` / ``VerificationError``, remembered for ``failure_ttl``."""
        while True:
            with self._lock:
                cached = self._cache.get(key)
                if cached and cached[1] > self.clock():
                    return cached[0]
                pending = self._pending.get(key)
                if pending is None:
                    self._admit(key, sender)
                    done = self._pending[key] = threading.Event()
                    break
            pending.wait(self.timeout)  # another request fetches this key: share its outcome
        try:
            value, ttl = fetch()
        except (UnavailableError, VerificationError) as exc:
            reason, detail = (exc.reason, exc.detail) if isinstance(exc, VerificationError) else (None, str(exc))
            with self._lock:
                _keep(self._failures, key, (reason, detail, self.clock() + self.failure_ttl))
            raise
        else:
            with self._lock:
                _keep(self._cache, key, (value, self.clock() + ttl))
            return value
        finally:
            with self._lock:
                del self._pending[key]
            done.set()

    def _admit(self, key: K, sender: str) -> None:
        """Raise a remembered failure of ``key``, or when the sender's or the overall budget is
        spent; else count a fetch. Called with the lock held."""
        moment = self.clock()
        while self._failures and next(iter(self._failures.values()))[2] <= moment:
            self._failures.popitem(last=False)  # kept in the order they expire (one ttl for all)
        failed = self._failures.get(key)
        if failed is not None:
            reason, detail, until = failed
            if until > moment:
                if reason is None:
                    raise UnavailableError(f"{detail} (remembered failure)")
                raise VerificationError(reason, f"{detail} (remembered failure)")
            del self._failures[key]
        mine = self._by_sender.pop(sender, None) or deque()
        self._by_sender[sender] = mine  # the most recent sender last
        while len(self._by_sender) > MAX_SENDERS:
            del self._by_sender[next(iter(self._by_sender))]
        for recent in (self._fetches, mine):
            while recent and recent[0] <= moment - self.per_seconds:
                recent.popleft()
        if len(mine) >= self.per_sender or len(self._fetches) >= self.max_fetches:
            raise UnavailableError(f"{self.name} fetches are rate-limited; retry later")
        self._fetches.append(moment)
        mine.append(moment)


def _keep(kept: OrderedDict[K, T], key: K, value: T) -> None:
    kept.pop(key, None)
    kept[key] = value
    while len(kept) > MAX_KEPT:
        kept.popitem(last=False)
