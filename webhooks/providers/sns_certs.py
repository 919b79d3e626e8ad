"""The I/O half of SNS verification: SNS's signing certificates, and confirming subscriptions.

``SnsCertLoader`` is PayPal's ``CertLoader`` (``paypal_certs``: no redirects, 64 KiB cap, 5 s
timeout, cached until the certificate expires, a failure remembered per URL for ``failure_ttl``,
concurrent requests for one URL sharing one fetch, per-sender and overall fetch budgets, so junk
naming a URL spends only that URL's fetch and never a genuine one's) with SNS's rules: only
``https://sns.<region>.amazonaws.com/SimpleNotificationService-<id>.pem`` (``sns_hosts``), a leaf
named ``sns.amazonaws.com`` or ``sns.<region>.amazonaws.com`` that chains to a trusted root.

``Confirmer(url)`` GETs a ``SubscribeURL`` (``sns_hosts.is_subscribe_url`` only; asked only after
the message's signature verified) through ``outbound``: no redirects, 64 KiB cap, 5 s timeout. A
URL confirmed (or being confirmed by a concurrent request) is remembered and never fetched again (a
re-sent confirmation is answered at once);
at most ``max_calls`` confirmations go out per ``per_seconds`` (beyond: ``UnavailableError``, a 503
SNS retries). SNS unreachable, 5xx or 429 → ``UnavailableError``; another refusal (an expired token)
→ ``PayloadError``. ``fetch`` and ``clock`` are injectable for tests.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable

from webhooks import outbound
from webhooks.errors import PayloadError, UnavailableError, VerificationError
from webhooks.providers.paypal_certs import MAX_BYTES, CertLoader
from webhooks.providers.sns_hosts import HOST, is_sns_cert_url, is_subscribe_url
from webhooks.vocabulary import Reason

REMEMBERED = 10_000  # confirmed SubscribeURLs remembered (the oldest forgotten first)


class SnsCertLoader(CertLoader):
    """A callable ``url -> PEM`` for ``Sns(cert_loader=...)``; thread-safe, caching, budgeted."""

    name = "SNS"
    subjects = ("sns.amazonaws.com",)

    def allows(self, url: str) -> bool:
        return is_sns_cert_url(url)

    def is_subject(self, name: str) -> bool:
        return name in self.subjects or HOST.fullmatch(name) is not None


class Confirmer:
    """A callable ``SubscribeURL -> None`` for ``Sns(confirmer=...)``; thread-safe, remembering."""

    def __init__(
        self,
        *,
        timeout: float = 5.0,
        fetch: Callable[[str], outbound.Answer] | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_calls: int = 30,
        per_seconds: float = 60.0,
    ) -> None:
        self.timeout, self.fetch, self.clock = timeout, fetch or self._fetch, clock
        self.max_calls, self.per_seconds = max_calls, per_seconds
        self._confirmed: OrderedDict[str, None] = OrderedDict()
        self._pending: set[str] = set()
        self._calls: deque[float] = deque()
        self._lock = threading.Lock()

    def __call__(self, url: str) -> None:
        if not is_subscribe_url(url):
            raise VerificationError(Reason.URL_MISMATCH, "not an SNS SubscribeURL")
        with self._lock:
            if url in self._confirmed or url in self._pending:
                return
            moment = self.clock()
            while self._calls and self._calls[0] <= moment - self.per_seconds:
                self._calls.popleft()
            if len(self._calls) >= self.max_calls:
                raise UnavailableError("SNS subscription confirmations are rate-limited; retry later")
            self._calls.append(moment)
            self._pending.add(url)
        try:
            answer = self.fetch(url)
            if answer.status >= 500 or answer.status == 429:
                raise UnavailableError(f"SNS answered the confirmation {answer.status}")
            if not 200 <= answer.status < 300:
                raise PayloadError(f"SNS refused the confirmation ({answer.status})")
            with self._lock:
                self._confirmed[url] = None
                while len(self._confirmed) > REMEMBERED:
                    self._confirmed.popitem(last=False)
        finally:
            with self._lock:
                self._pending.discard(url)

    def _fetch(self, url: str) -> outbound.Answer:
        try:  # a redirect could leave SNS's hosts: it is an answer of its own, refused above
            return outbound.call(url, timeout=self.timeout, limit=MAX_BYTES, redirects=False)
        except outbound.Unreachable as exc:
            raise UnavailableError("SNS unreachable for the subscription confirmation") from exc


default_loader = SnsCertLoader()
default_confirmer = Confirmer()
