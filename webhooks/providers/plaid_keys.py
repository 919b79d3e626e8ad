"""The I/O half of Plaid verification: fetch and cache the JWKs Plaid signs its webhooks with.

``KeyLoader(endpoint, kid, sender) -> JWK`` posts ``{"client_id", "secret", "key_id": kid}`` (the
secret: the endpoint's first ``secrets`` entry) to
``<api_base>/webhook_verification_key/get`` (``api_base``: ``https://production.plaid.com`` by
default, else another Plaid host (``sandbox``, ``development``) or a loopback address, for a local
fake; nothing else: ``validate`` refuses it at start-up), no redirects, 16 KiB cap, at most the
endpoint's ``outbound_timeout`` (5 s by default). The answer's ``key`` must be an ES256 P-256 JWK
naming ``kid``. Good keys are cached by (API base, client id, kid) for ``key_ttl`` seconds (then
fetched again, which is how a key's ``expired_at`` is learnt). Failures: Plaid unreachable, 5xx,
429 or refusing our credentials (401/403, ``INVALID_API_KEYS``…) → ``UnavailableError`` (a 503:
Plaid retries); any other answer (Plaid's 400 for a kid it never issued) → ``VerificationError("signature_mismatch")``.
Budget, the one PayPal's certificates taught (``paypal_certs``): a kid is fetched at most once per
``failure_ttl`` seconds (a failure is remembered and answered again without a fetch; concurrent
requests for one uncached kid share one fetch); a sender (``clients.sender``) gets at most
``per_sender`` fetches of new kids per ``per_seconds``, and overall at most ``max_fetches``. Junk
kids therefore spend only their sender's budget: a genuine delivery whose kid is cached never
fetches, and one whose kid is new waits (a 503 Plaid retries) only when more than
``max_fetches`` / ``per_sender`` senders send junk kids within a minute; Plaid rotates its keys
rarely. ``fetch`` and ``clock`` are injectable for tests.
Docs: https://plaid.com/docs/api/webhooks/webhook-verification/#webhook_verification_keyget
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from webhooks import outbound
from webhooks.errors import UnavailableError, VerificationError
from webhooks.providers.base import Endpoint
from webhooks.providers.plaid_jose import allowed_base, public_key
from webhooks.vocabulary import Reason

PLAID_API = "https://production.plaid.com"
MAX_BYTES = 16 * 1024
# Plaid's error codes that say our client_id/secret cannot ask (not that the kid is junk)
CONFIG_ERRORS = frozenset({"INVALID_API_KEYS", "UNAUTHORIZED_ENVIRONMENT", "INVALID_PRODUCT"})
MAX_SENDERS = 10_000  # senders whose recent fetches are remembered (the least recent forgotten first)
Fetch = Callable[[Endpoint, str], Any]  # (endpoint, kid) -> the parsed answer's "key"


def _fail(detail: str) -> VerificationError:
    return VerificationError(Reason.SIGNATURE_MISMATCH, detail)


class KeyLoader:
    """A callable ``(endpoint, kid, sender) -> JWK`` for ``Plaid(key_loader=...)``; thread-safe, caching."""

    def __init__(
        self,
        *,
        timeout: float = 5.0,
        fetch: Fetch | None = None,
        clock: Callable[[], float] = time.monotonic,
        key_ttl: float = 3600.0,
        failure_ttl: float = 60.0,
        max_fetches: int = 120,
        per_seconds: float = 60.0,
        per_sender: int = 10,
    ) -> None:
        self.timeout, self.fetch, self.clock = timeout, fetch or self._fetch, clock
        self.key_ttl, self.failure_ttl = key_ttl, failure_ttl
        self.max_fetches, self.per_seconds, self.per_sender = max_fetches, per_seconds, per_sender
        self._cache: dict[tuple[str, str, str], tuple[Mapping[str, Any], float]] = {}
        self._failures: dict[tuple[str, str, str], tuple[Reason | None, str, float]] = {}
        self._fetches: deque[float] = deque()
        self._by_sender: dict[str, deque[float]] = {}  # oldest sender first
        self._pending: dict[tuple[str, str, str], threading.Event] = {}
        self._lock = threading.Lock()

    def __call__(self, endpoint: Endpoint, kid: str, sender: str = "") -> Mapping[str, Any]:
        slot = (str(endpoint.options.get("api_base") or PLAID_API), str(endpoint.options.get("client_id")), kid)
        while True:
            with self._lock:
                cached = self._cache.get(slot)
                if cached and cached[1] > self.clock():
                    return cached[0]
                pending = self._pending.get(slot)
                if pending is None:
                    self._admit(slot, sender)
                    done = self._pending[slot] = threading.Event()
                    break
            pending.wait(self.timeout)  # another request fetches this kid: share its outcome
        try:
            key = self.check(self.fetch(endpoint, kid), kid)
        except (UnavailableError, VerificationError) as exc:
            reason, detail = (exc.reason, exc.detail) if isinstance(exc, VerificationError) else (None, str(exc))
            with self._lock:
                self._failures[slot] = (reason, detail, self.clock() + self.failure_ttl)
            raise
        else:
            with self._lock:
                self._cache[slot] = (key, self.clock() + self.key_ttl)
            return key
        finally:
            with self._lock:
                del self._pending[slot]
            done.set()

    def _admit(self, slot: tuple[str, str, str], sender: str) -> None:
        """Raise a remembered failure of ``slot``, or when the sender's or the overall budget is
        spent; else count a fetch. Called with the lock held."""
        moment = self.clock()
        for stale in [k for k, (_, _, until) in self._failures.items() if until <= moment]:
            del self._failures[stale]
        failed = self._failures.get(slot)
        if failed is not None:
            reason, detail, _ = failed
            if reason is None:
                raise UnavailableError(f"{detail} (remembered failure)")
            raise VerificationError(reason, f"{detail} (remembered failure)")
        mine = self._by_sender.pop(sender, None) or deque()
        self._by_sender[sender] = mine  # the most recent sender last
        while len(self._by_sender) > MAX_SENDERS:
            del self._by_sender[next(iter(self._by_sender))]
        for recent in (self._fetches, mine):
            while recent and recent[0] <= moment - self.per_seconds:
                recent.popleft()
        if len(mine) >= self.per_sender or len(self._fetches) >= self.max_fetches:
            raise UnavailableError("Plaid key fetches are rate-limited; retry later")
        self._fetches.append(moment)
        mine.append(moment)

    def _fetch(self, endpoint: Endpoint, kid: str) -> Any:
        base = str(endpoint.options.get("api_base") or PLAID_API).rstrip("/")
        if not allowed_base(base):  # validate refused it at start-up; never send credentials elsewhere
            raise _fail("api_base is not a Plaid host")
        secret = endpoint.secrets[0] if endpoint.secrets else ""
        body = {"client_id": endpoint.options.get("client_id"), "secret": secret, "key_id": kid}
        try:
            answer = outbound.call(
                f"{base}/webhook_verification_key/get",
                method="POST",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
                timeout=min(self.timeout, endpoint.outbound_timeout),
                limit=MAX_BYTES,
                redirects=False,
            )
        except outbound.Unreachable as exc:
            raise UnavailableError("Plaid's API unreachable") from exc
        if answer.status >= 500 or answer.status in (401, 403, 429):
            raise UnavailableError(f"Plaid's key endpoint answered {answer.status}")
        try:
            parsed = json.loads(answer.body) if len(answer.body) <= MAX_BYTES else None
        except (ValueError, UnicodeDecodeError):
            parsed = None
        found = parsed if isinstance(parsed, dict) else {}
        if found.get("error_code") in CONFIG_ERRORS:  # our credentials, not the sender's kid: Plaid retries
            raise UnavailableError(f"Plaid refused this endpoint's credentials ({found['error_code']})")
        if answer.status != 200:
            raise _fail(f"Plaid's key endpoint answered {answer.status} for kid {kid!r}")
        return found.get("key")

    @staticmethod
    def check(key: Any, kid: str) -> Mapping[str, Any]:
        """``key`` when it is an ES256 P-256 JWK naming ``kid``; ``signature_mismatch`` otherwise."""
        try:
            public_key(key)
        except ValueError as exc:
            raise _fail(f"Plaid's key {kid!r} is unusable: {exc}") from exc
        if key.get("kid") != kid:
            raise _fail("Plaid answered another kid")
        return dict(key)


default_loader = KeyLoader()
