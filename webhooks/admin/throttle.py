"""Wrong admin passwords, throttled per client: ``FREE`` tries, then one every ``REFILL`` seconds.

A token bucket per client (``clients.client_key``: its address; an IPv6 address by its /64, which
one host usually holds whole): each wrong password takes a token. With none left, every request from that
client — even with the right password — is answered 429 with ``Retry-After`` until a token is
back; the answer does not depend on the password, so a throttled client learns nothing. Other
clients are never affected. With ``REDIS_URL`` the buckets live in Redis (one Lua script, given this
process's clock), shared by every web process of every instance, and a process remembers a wait
Redis gave it, so a throttled client's flood never reaches Redis; without it each process keeps its own. If
Redis cannot answer, that is never a 5xx and never a lockout: this process's buckets decide
(counted in ``webhooks_rate_limit_failures_total``, logged) and Redis is tried again after
``PAUSE`` seconds.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from webhooks.metrics import RATE_LIMIT_FAILURES

if TYPE_CHECKING:
    import redis

log = logging.getLogger(__name__)
FREE = 10  # wrong passwords a client may type before it waits: typos cost an operator nothing
REFILL = 30.0  # seconds per token after that: ~2 900 guesses a day per client instead of 1 600 a second
PAUSE = 1.0  # seconds without Redis after it failed
MAX_CLIENTS = 10_000  # buckets one process keeps (the embedded default, or Redis down)
# KEYS[1]: the client's bucket (a hash: tokens, stamp). ARGV: now, capacity, seconds per token,
# cost (1: a wrong password, 0: a look). Returns the wait as a string, "0" when the client may try;
# a wrong password that takes the last token returns "last". Only a taken token is written.
SCRIPT = """
local now, capacity, per, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local b = redis.call("HMGET", KEYS[1], "tokens", "stamp")
local tokens = capacity
if b[1] then tokens = math.min(capacity, tonumber(b[1]) + math.max(0, now - tonumber(b[2])) / per) end
if tokens < 1 then return string.format("%.6f", (1 - tokens) * per) end
if cost == 0 then return "0" end
tokens = tokens - 1
redis.call("HSET", KEYS[1], "tokens", string.format("%.6f", tokens), "stamp", string.format("%.6f", now))
redis.call("PEXPIRE", KEYS[1], math.ceil((capacity - tokens) * per * 1000) + 1000)
if tokens < 1 then return "last" end
return "0"
"""


class LoginThrottle:
    """The buckets on ``connection`` (a real Redis), or this process's (None)."""

    def __init__(
        self,
        connection: redis.Redis | None = None,
        clock: Callable[[], float] = time.time,
        free: int = FREE,
        refill: float = REFILL,
        deployment: str = "default",
    ) -> None:
        self.clock, self.free, self.refill = clock, free, refill
        self.prefix = f"{deployment}:webhooks:admin-login:"  # WEBHOOKS_QUEUE first: deployments share no key
        self.script = connection.register_script(SCRIPT) if connection is not None else None
        self.paused_until = 0.0
        self.buckets: dict[str, tuple[float, float]] = {}  # client → (tokens, stamp), oldest first
        # client → when Redis said its wait ends: a throttled client's flood costs Redis nothing.
        self.blocked: dict[str, float] = {}
        self.lock = threading.Lock()

    def wait(self, client: str) -> int:
        """Whole seconds ``client`` must wait before it may log in (0: now)."""
        return self._take(client, 0)[0]

    def failed(self, client: str) -> tuple[int, bool]:
        """Count a wrong password: (0, whether that was the client's last free try) when it was
        counted (answer 401), else (seconds to wait, False): the client is throttled (429)."""
        return self._take(client, 1)

    def _take(self, client: str, cost: int) -> tuple[int, bool]:
        now = self.clock()
        until = self.blocked.get(client)
        if until is not None and until > now:
            return math.ceil(until - now), False
        if self.script is not None and now >= self.paused_until:
            from redis import RedisError

            try:
                answer = self.script(keys=[self.prefix + client], args=[now, self.free, self.refill, cost])
            except RedisError as exc:
                RATE_LIMIT_FAILURES.inc()
                self.paused_until = now + PAUSE
                log.warning(
                    "admin login throttle: Redis failed (%s); this process's buckets decide for %ss",
                    exc.__class__.__name__,
                    PAUSE,
                )
            else:
                text = answer.decode() if isinstance(answer, bytes) else str(answer)
                if text == "last":
                    return 0, True
                wait = float(text)
                if wait:
                    self._block(client, now + wait, now)
                return math.ceil(wait), False
        return self._local(client, cost, now)

    def _local(self, client: str, cost: int, now: float) -> tuple[int, bool]:
        with self.lock:
            tokens, stamp = self.buckets.get(client, (float(self.free), now))
            tokens = min(float(self.free), tokens + max(0.0, now - stamp) / self.refill)
            if tokens < 1:
                return math.ceil((1 - tokens) * self.refill), False
            if not cost:
                return 0, False
            self.buckets.pop(client, None)  # re-inserted last: the dict stays oldest first
            self.buckets[client] = (tokens - 1, now)
            if len(self.buckets) > MAX_CLIENTS:
                self._prune(now)
            return 0, tokens - 1 < 1

    def _block(self, client: str, until: float, now: float) -> None:
        with self.lock:
            if len(self.blocked) >= MAX_CLIENTS:
                self.blocked = {k: v for k, v in self.blocked.items() if v > now}
                while len(self.blocked) >= MAX_CLIENTS - MAX_CLIENTS // 10:  # as _prune: not once a request
                    del self.blocked[next(iter(self.blocked))]
            self.blocked[client] = until

    def _prune(self, now: float) -> None:
        """Forget the buckets that are full again, then the oldest, down to 90 % of the cap: memory
        stays bounded, and the scan runs once per thousand new clients, not once per guess."""
        for key, (tokens, stamp) in list(self.buckets.items()):
            if tokens + (now - stamp) / self.refill >= self.free:
                del self.buckets[key]
        while len(self.buckets) > MAX_CLIENTS - MAX_CLIENTS // 10:
            del self.buckets[next(iter(self.buckets))]
