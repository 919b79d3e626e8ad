"""The I/O half of PayPal verification: fetch, check and cache PayPal's signing certificates.

``CertLoader(url) -> PEM bytes`` fetches only ``https://{api,api-m}[.sandbox].paypal.com
/v1/notifications/certs/…`` (no redirects, 64 KiB cap, 5 s timeout), then checks that the PEM
parses, that the leaf is valid now, names ``messageverificationcerts[.sandbox].paypal.com`` (the
rule PayPal's own SDKs apply) and chains to a trusted root (the ``certifi`` bundle, or
``ca_file``). Good certificates are cached in memory by URL until they expire.
Failures: PayPal unreachable or 5xx → ``UnavailableError`` (PayPal retries); anything else →
``VerificationError("signature_mismatch")``.
Budget, per distinct URL and per sender: ``webhooks.providers.loader.BoundedLoader`` (a failure
remembered for ``failure_ttl``, one fetch per URL at a time, ``per_sender`` and ``max_fetches``
fetches per ``per_seconds``), so junk naming a URL spends only its sender's budget, never a genuine
certificate's: one waits only when more than ``max_fetches`` / ``per_sender`` senders send junk URLs
within a minute. ``fetch`` and ``clock`` are injectable for tests.
``read_pinned(path)`` reads a pinned certificate file once, for offline set-ups.
"""

from __future__ import annotations

import time
import warnings
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
from webhooks.providers.loader import BoundedLoader
from webhooks.providers.paypal_hosts import is_paypal_cert_url
from webhooks.vocabulary import Reason

SUBJECTS = ("messageverificationcerts.paypal.com", "messageverificationcerts.sandbox.paypal.com")
MAX_BYTES = 64 * 1024
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
        self.fetch = fetch or self._fetch
        self._loader: BoundedLoader[str, bytes] = BoundedLoader(
            f"{self.name} certificate",
            timeout=timeout,
            clock=clock,
            failure_ttl=failure_ttl,
            max_fetches=max_fetches,
            per_seconds=per_seconds,
            per_sender=per_sender,
        )

    def __call__(self, url: str, sender: str = "") -> bytes:
        if not self.allows(url):
            raise VerificationError(Reason.URL_MISMATCH, f"not a {self.name} certificate URL")

        def fetch() -> tuple[bytes, float]:
            now = time.time()
            pem = self.fetch(url)
            return pem, self.check(pem, datetime.fromtimestamp(now, UTC)) - now  # good until it expires

        return self._loader.load(url, sender, fetch)

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
