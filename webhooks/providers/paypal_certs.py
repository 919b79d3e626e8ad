"""The I/O half of PayPal verification: fetch, check and cache PayPal's signing certificates.

``CertLoader(url) -> PEM bytes`` fetches only ``https://{api,api-m}[.sandbox].paypal.com
/v1/notifications/certs/…`` (no redirects, 64 KiB cap, 5 s timeout), then checks that the PEM
parses, that the leaf is valid now, names ``messageverificationcerts[.sandbox].paypal.com`` (the
rule PayPal's own SDKs apply) and chains to a trusted root (the ``certifi`` bundle, or
``ca_file``). Good certificates are cached in memory by URL until they expire.
Failures: PayPal unreachable or 5xx → ``UnavailableError`` (PayPal retries); anything else →
``VerificationError("signature_mismatch")``.
Budget, per distinct URL: a URL is fetched at most once per ``failure_ttl`` seconds (a failure is
remembered and answered again without a fetch; concurrent requests for one uncached URL share one
fetch), so junk naming a URL spends only that URL's fetch, never a genuine one's. A sender (its
address, ``clients.sender``) gets at most ``per_sender`` fetches of new URLs per ``per_seconds``,
and overall at most ``max_fetches`` distinct URLs are fetched per ``per_seconds`` (beyond either:
``UnavailableError``, a 503 PayPal retries), so fetches to PayPal stay bounded and junk from one
sender never spends PayPal's own: a genuine certificate waits only when more than
``max_fetches`` / ``per_sender`` senders send junk URLs within a minute. ``fetch`` and ``clock``
are injectable for tests.
``read_pinned(path)`` reads a pinned certificate file once, for offline set-ups.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path

from cryptography import x509
from cryptography.x509 import DNSName
from cryptography.x509.verification import PolicyBuilder, Store
from cryptography.x509.verification import VerificationError as ChainError

from webhooks import outbound
from webhooks.errors import UnavailableError, VerificationError
from webhooks.providers.paypal_hosts import is_paypal_cert_url
from webhooks.vocabulary import Reason

SUBJECTS = ("messageverificationcerts.paypal.com", "messageverificationcerts.sandbox.paypal.com")
MAX_BYTES = 64 * 1024
MAX_SENDERS = 10_000  # senders whose recent fetches are remembered (the least recent forgotten first)
END = b"-----END CERTIFICATE-----"


def _fail(detail: str) -> VerificationError:
    return VerificationError(Reason.SIGNATURE_MISMATCH, detail)


class CertLoader:
    """A callable ``url -> PEM`` for ``PayPal(cert_loader=...)``; thread-safe, caching. Another
    provider's certificates (``sns_certs``) subclass it: ``name``, ``subjects`` and ``allows``."""

    name = "PayPal"
    subjects: tuple[str, ...] = SUBJECTS

    def allows(self, url: str) -> bool:
        """Whether ``url`` may be fetched at all (checked before any budget is spent)."""
        return is_paypal_cert_url(url)

    def is_subject(self, name: str) -> bool:
        """Whether a leaf's common name is one the provider signs with (then the chain is checked for it)."""
        return name in self.subjects

    def __init__(
        self,
        *,
        ca_file: str | None = None,
        timeout: float = 5.0,
        check_chain: bool = True,
        fetch: Callable[[str], bytes] | None = None,
        clock: Callable[[], float] = time.monotonic,
        failure_ttl: float = 60.0,
        max_fetches: int = 120,
        per_seconds: float = 60.0,
        per_sender: int = 10,
    ) -> None:
        self.ca_file, self.timeout, self.check_chain = ca_file, timeout, check_chain
        self.fetch, self.clock = fetch or self._fetch, clock
        self.failure_ttl, self.max_fetches, self.per_seconds = failure_ttl, max_fetches, per_seconds
        self._cache: dict[str, tuple[bytes, float]] = {}
        self._failures: dict[str, tuple[Reason | None, str, float]] = {}  # url -> (reason, detail, until)
        self.per_sender = per_sender
        self._fetches: deque[float] = deque()  # clock() of recent fetches
        self._by_sender: dict[str, deque[float]] = {}  # sender -> clock() of its recent fetches, oldest sender first
        self._pending: dict[str, threading.Event] = {}  # url -> set when its one fetch is done
        self._lock = threading.Lock()

    def __call__(self, url: str, sender: str = "") -> bytes:
        now = time.time()
        if not self.allows(url):
            raise VerificationError(Reason.URL_MISMATCH, f"not a {self.name} certificate URL")
        while True:
            with self._lock:
                cached = self._cache.get(url)
                if cached and cached[1] > now:
                    return cached[0]
                pending = self._pending.get(url)
                if pending is None:
                    self._admit(url, sender)
                    done = self._pending[url] = threading.Event()
                    break
            pending.wait(self.timeout)  # another request fetches this URL: share its outcome
        try:
            pem = self.fetch(url)
            expires = self.check(pem, datetime.fromtimestamp(now, UTC))
        except (UnavailableError, VerificationError) as exc:
            reason, detail = (exc.reason, exc.detail) if isinstance(exc, VerificationError) else (None, str(exc))
            with self._lock:
                self._failures[url] = (reason, detail, self.clock() + self.failure_ttl)
            raise
        else:
            with self._lock:
                self._cache[url] = (pem, expires)
            return pem
        finally:
            with self._lock:
                del self._pending[url]
            done.set()

    def _admit(self, url: str, sender: str) -> None:
        """Raise a remembered failure of ``url``, or when the sender's or the overall fetch budget
        is spent; else count a fetch. Called with the lock held."""
        moment = self.clock()
        for key in [k for k, (_, _, until) in self._failures.items() if until <= moment]:
            del self._failures[key]
        failed = self._failures.get(url)
        if failed is None:
            mine = self._by_sender.pop(sender, None) or deque()
            self._by_sender[sender] = mine  # the most recent sender last
            while len(self._by_sender) > MAX_SENDERS:
                del self._by_sender[next(iter(self._by_sender))]
            for recent in (self._fetches, mine):
                while recent and recent[0] <= moment - self.per_seconds:
                    recent.popleft()
            if len(mine) >= self.per_sender or len(self._fetches) >= self.max_fetches:
                raise UnavailableError(f"{self.name} certificate fetches are rate-limited; retry later")
            self._fetches.append(moment)
            mine.append(moment)
            return
        reason, detail, _ = failed
        if reason is None:
            raise UnavailableError(f"{detail} (remembered failure)")
        raise VerificationError(reason, f"{detail} (remembered failure)")

    def _fetch(self, url: str) -> bytes:
        try:  # a redirect could leave the provider's hosts: it is an answer of its own, refused below
            answer = outbound.call(url, timeout=self.timeout, limit=MAX_BYTES, redirects=False)
        except outbound.Unreachable as exc:
            raise UnavailableError(f"{self.name} certificate host unreachable") from exc
        if answer.status >= 500 or answer.status == 429:
            raise UnavailableError(f"{self.name} certificate host answered {answer.status}")
        if answer.status >= 300:
            raise _fail(f"{self.name} certificate host answered {answer.status}")
        if len(answer.body) > MAX_BYTES:
            raise _fail("certificate response too large")
        return answer.body

    def check(self, pem: bytes, now: datetime) -> float:
        """Raise unless ``pem`` is the provider's signing certificate; return when the cache entry expires."""
        try:
            certs = x509.load_pem_x509_certificates(pem)
        except ValueError as exc:
            raise _fail("certificate does not parse") from exc
        leaf = certs[0]
        if not leaf.not_valid_before_utc <= now <= leaf.not_valid_after_utc:
            raise _fail("certificate is not valid now")
        names = leaf.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
        subject = next((str(n.value) for n in names if self.is_subject(str(n.value))), None)
        if subject is None:
            raise _fail(f"certificate is not {self.name}'s message verification certificate")
        if self.check_chain:
            builder = PolicyBuilder().store(Store(_roots(self.ca_file))).time(now)
            try:
                builder.build_server_verifier(DNSName(subject)).verify(leaf, certs[1:])
            except ChainError as exc:
                raise _fail(f"certificate does not chain to a trusted root: {exc}") from exc
        return leaf.not_valid_after_utc.timestamp()


@lru_cache(maxsize=4)
def _roots(ca_file: str | None) -> list[x509.Certificate]:
    if ca_file is None:
        import certifi

        ca_file = certifi.where()
    roots = []
    with warnings.catch_warnings():
        # Some public roots carry a non-positive serial; cryptography warns (and will refuse) each.
        warnings.simplefilter("ignore")
        for block in Path(ca_file).read_bytes().split(END)[:-1]:
            try:
                roots.append(x509.load_pem_x509_certificate(block + END))
            except ValueError:
                continue
    return roots


@lru_cache(maxsize=16)
def read_pinned(path: str) -> bytes:
    """A pinned PEM certificate, read once (checked for parsing and dates by the provider)."""
    return Path(path).read_bytes()


default_loader = CertLoader()
