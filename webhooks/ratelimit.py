"""Per-endpoint rate limit: a token bucket per endpoint, per web process (no I/O, one lock).

An endpoint with ``rate_limit = N`` accepts on average N requests a second with bursts of up to N
(at least 1); above that the receiver answers 429 with ``Retry-After`` before reading the body.
Each web process keeps its own buckets, so the service-wide limit is N × the number of processes.
Providers retry a 429 like any other non-2xx, so nothing is lost: delivery is only delayed.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable


class TokenBucket:
    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.capacity, self.clock = rate, max(1.0, rate), clock
        self.tokens, self.stamp = self.capacity, clock()
        self.lock = threading.Lock()

    def take(self) -> float:
        """0 when a request may pass, else the seconds until one may."""
        with self.lock:
            now = self.clock()
            self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now
            if self.tokens >= 1:
                self.tokens -= 1
                return 0.0
            return (1 - self.tokens) / self.rate


class RateLimits:
    """The buckets of one process, created on first use."""

    def __init__(self) -> None:
        self.buckets: dict[str, TokenBucket] = {}
        self.lock = threading.Lock()

    def retry_after(self, endpoint: str, rate: float | None) -> int:
        """0 when the request may pass, else whole seconds to put in ``Retry-After``."""
        if not rate:
            return 0
        bucket = self.buckets.get(endpoint)
        if bucket is None:
            with self.lock:
                bucket = self.buckets.setdefault(endpoint, TokenBucket(rate))
        wait = bucket.take()
        return math.ceil(wait) if wait else 0
