"""A token bucket: on average ``rate`` takes a second, in bursts of up to ``max(1, rate)``. In this
process's memory; the receiver's rate limits (``webhooks.receiver.ratelimit``) and the providers'
API budgets (``webhooks.providers.api``) both draw on one."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    """A rate with a burst; ``take`` says how long until a take may pass (0: now)."""

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
