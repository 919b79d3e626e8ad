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
Budget, the one PayPal's and SNS's certificates have (``webhooks.providers.loader.BoundedLoader``):
a kid fetched at most once per ``failure_ttl`` seconds, one fetch per kid at a time, ``per_sender``
and ``max_fetches`` fetches per ``per_seconds``. Junk kids therefore spend only their sender's
budget: a genuine delivery whose kid is cached never
fetches, and one whose kid is new waits (a 503 Plaid retries) only when more than
``max_fetches`` / ``per_sender`` senders send junk kids within a minute; Plaid rotates its keys
rarely. ``fetch`` and ``clock`` are injectable for tests.
Docs: https://plaid.com/docs/api/webhooks/webhook-verification/#webhook_verification_keyget
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from webhooks import outbound
from webhooks.errors import UnavailableError, VerificationError
from webhooks.providers.base import Endpoint
from webhooks.providers.loader import BoundedLoader
from webhooks.providers.plaid_jose import allowed_base, public_key
from webhooks.vocabulary import Reason

PLAID_API = "https://production.plaid.com"
MAX_BYTES = 16 * 1024
# Plaid's error codes that say our client_id/secret cannot ask (not that the kid is junk)
CONFIG_ERRORS = frozenset({"INVALID_API_KEYS", "UNAUTHORIZED_ENVIRONMENT", "INVALID_PRODUCT"})
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
        self.timeout, self.fetch, self.key_ttl = timeout, fetch or self._fetch, key_ttl
        self._loader: BoundedLoader[tuple[str, str, str], Mapping[str, Any]] = BoundedLoader(
            "Plaid key",
            timeout=timeout,
            clock=clock,
            failure_ttl=failure_ttl,
            max_fetches=max_fetches,
            per_seconds=per_seconds,
            per_sender=per_sender,
        )

    def __call__(self, endpoint: Endpoint, kid: str, sender: str = "") -> Mapping[str, Any]:
        slot = (str(endpoint.options.get("api_base") or PLAID_API), str(endpoint.options.get("client_id")), kid)
        return self._loader.load(slot, sender, lambda: (self.check(self.fetch(endpoint, kid), kid), self.key_ttl))

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
