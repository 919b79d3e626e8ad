"""Per-endpoint rate limit: a token bucket per endpoint, shared by the whole service on Redis.

An endpoint with ``rate_limit = N`` accepts on average N requests a second with bursts of up to N
(at least 1); above that the receiver answers 429 with ``Retry-After`` before reading the body.
With ``REDIS_URL`` set the bucket lives in Redis (one Lua script, Redis's clock), so every web
process of every instance draws on one budget of N. Without it (the embedded default: one process)
each process keeps its own buckets. If Redis cannot answer, that is never a 5xx: the check
falls back to this process's bucket (counted in ``webhooks_rate_limit_failures_total``, logged)
and Redis is tried again after ``PAUSE`` seconds.
Providers retry a 429 like any other non-2xx, so nothing is lost: delivery is only delayed.

``sender_rate_limit = N`` is the same budget per sender address (``clients.sender``) of one
endpoint, checked first so that a flood from one address spends its own budget, not the
endpoint's. Its Redis buckets expire within seconds of their sender's last request; this process's
own keep at most ``MAX_SENDERS`` (the least recently seen forgotten first: a forgotten sender starts
afresh, still under the endpoint's ``rate_limit``).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

from webhooks.buckets import TokenBucket
from webhooks.metrics import RATE_LIMIT_FAILURES

if TYPE_CHECKING:  # provider modules import TokenBucket, and they load no Redis client
    import redis

log = logging.getLogger("webhooks.ratelimit")  # the name the docs and log filters know
MAX_SENDERS = 10_000  # per-sender buckets this process keeps
PAUSE = 1.0  # seconds without Redis after it failed: an outage costs one timeout a second, not one a request
FAILURES = RATE_LIMIT_FAILURES
# KEYS[1]: the bucket (a hash: tokens, stamp); ARGV: rate, capacity. Returns the wait as a string
# (a Lua number would come back truncated to an integer); "0" when the request may pass.
TAKE = """
local rate, capacity = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = redis.call("TIME")
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local b = redis.call("HMGET", KEYS[1], "tokens", "stamp")
local tokens, stamp = tonumber(b[1]) or capacity, tonumber(b[2]) or now
tokens = math.min(capacity, tokens + math.max(0, now - stamp) * rate)
local wait = 0
if tokens >= 1 then tokens = tokens - 1 else wait = (1 - tokens) / rate end
redis.call("HSET", KEYS[1], "tokens", string.format("%.6f", tokens), "stamp", string.format("%.6f", now))
redis.call("PEXPIRE", KEYS[1], math.ceil(capacity / rate * 1000) + 1000)
return string.format("%.6f", wait)
"""


def key(endpoint: str, deployment: str = "default") -> str:
    """An endpoint's bucket, under the deployment's queue name (``WEBHOOKS_QUEUE``): two
    deployments on one Redis database share no key."""
    return f"{deployment}:webhooks:ratelimit:{endpoint}"


def sender_key(endpoint: str, sender: str, deployment: str = "default") -> str:
    # The length: no name collides.
    return f"{deployment}:webhooks:ratelimit-sender:{len(endpoint)}:{endpoint}:{sender}"


class RateLimits:
    """The service's buckets on ``connection`` (a real Redis), or this process's (None), created on first use."""

    def __init__(
        self,
        connection: redis.Redis | None = None,
        clock: Callable[[], float] = time.monotonic,
        deployment: str = "default",
    ) -> None:
        self.deployment = deployment  # the keys' prefix: WEBHOOKS_QUEUE
        self.buckets: dict[str, TokenBucket] = {}
        self.senders: OrderedDict[tuple[str, str], TokenBucket] = OrderedDict()  # least recently seen first
        self.lock = threading.Lock()
        self.clock = clock
        self.take = connection.register_script(TAKE) if connection is not None else None
        self.paused_until = 0.0

    def retry_after(self, endpoint: str, rate: float | None) -> int:
        """0 when the request may pass, else whole seconds to put in ``Retry-After``."""
        if not rate:
            return 0
        return self._wait(key(endpoint, self.deployment), rate, lambda: self._bucket(endpoint, rate))

    def sender_retry_after(self, endpoint: str, sender: str, rate: float | None) -> int:
        """As ``retry_after``, for one sender address of ``endpoint`` (its ``sender_rate_limit``)."""
        if not rate:
            return 0
        found = sender_key(endpoint, sender, self.deployment)
        return self._wait(found, rate, lambda: self._sender_bucket(endpoint, sender, rate))

    def _wait(self, redis_key: str, rate: float, local: Callable[[], TokenBucket]) -> int:
        if self.take is not None and self.clock() >= self.paused_until:
            from redis import RedisError

            try:
                wait = float(self.take(keys=[redis_key], args=[rate, max(1.0, rate)]))
                return math.ceil(wait) if wait else 0
            except RedisError as exc:
                FAILURES.inc()
                self.paused_until = self.clock() + PAUSE
                log.warning(
                    "rate limit: Redis failed (%s); this process's bucket decides for %ss",
                    exc.__class__.__name__,
                    PAUSE,
                )
        wait = local().take()
        return math.ceil(wait) if wait else 0

    def _bucket(self, endpoint: str, rate: float) -> TokenBucket:
        bucket = self.buckets.get(endpoint)
        if bucket is None:
            with self.lock:
                bucket = self.buckets.setdefault(endpoint, TokenBucket(rate, self.clock))
        return bucket

    def _sender_bucket(self, endpoint: str, sender: str, rate: float) -> TokenBucket:
        with self.lock:
            bucket = self.senders.get((endpoint, sender))
            if bucket is None:
                bucket = self.senders[endpoint, sender] = TokenBucket(rate, self.clock)
                while len(self.senders) > MAX_SENDERS:
                    self.senders.popitem(last=False)
            else:
                self.senders.move_to_end((endpoint, sender))
            return bucket
