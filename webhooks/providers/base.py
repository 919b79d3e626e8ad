"""The small interface every provider kind implements, and the helpers they share.

A provider module is sans-I/O: raw bytes, headers and secrets in; a ``Verified`` result or one
``VerificationError`` out. It never imports Flask, SQLAlchemy or Redis, and never reads the clock:
the caller passes ``now``. Beyond verifying, a kind declares its capabilities on ``Provider``,
each with a default meaning "not supported": ``fold`` (``folds``), ``refetch``, reconciliation
(``reconcile_with``, ``missed``, ``reconcile_every``), ``describe_version``, gaps (``gap_type``) and
``amount``. Callers ask these, never a kind's name; the I/O a capability needs lives in the kind's
API client module beside it (``stripe_api``, ``paypal_api``), loaded only inside the capability.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar

from webhooks.errors import ConfigError, PayloadError, VerificationError
from webhooks.vocabulary import Reason

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


@dataclass(frozen=True)
class Endpoint:
    """One configured receiving endpoint (``POST /webhooks/<name>``)."""

    name: str
    kind: str  # the provider kind (``providers.PROVIDERS``); configured as ``provider``
    secrets: tuple[str, ...]
    tolerance_seconds: int = 300
    basic_auth: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    rate_limit: float | None = None  # requests a second per web process; None: unlimited
    sender_rate_limit: float | None = None  # requests a second per sender address (``clients``); None: unlimited
    outbound_timeout: float = 10.0  # seconds a call to its API may wait (WEBHOOKS_OUTBOUND_TIMEOUT_SECONDS)
    secret_ids: tuple[str, ...] = ()  # ``secrets``' database ids, in order; () for the file's (no ids)
    # ``secrets``' windows, (not_before, expires_at) unix seconds or None; (): always live (the
    # file's). Applied at each request (``receive.live_at``): an expiry binds when it passes.
    windows: tuple[tuple[float | None, float | None], ...] = ()


@dataclass(frozen=True)
class Request:
    """What a provider needs of an HTTP request: lower-cased headers, the raw body, the URL, and
    who sent it (``clients.sender``, for per-sender budgets; empty when unknown: a re-verify)."""

    headers: Mapping[str, str]
    body: bytes
    url: str = ""
    method: str = "POST"
    sender: str = ""

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass(frozen=True)
class VerifiedEvent:
    """One event proven genuine. ``index`` is its position when one body carries several.

    ``object_id`` and ``reference`` are search keys the verification parsed anyway (the object's
    id, a merchant reference); stored at receive so even an unprocessed event can be found.
    """

    event_id: str
    event_type: str
    index: int | None = None
    secret_index: int | None = None
    signed_at: int | None = None
    object_id: str | None = None
    reference: str | None = None


@dataclass(frozen=True)
class Reply:
    """A provider-specific answer (Adyen's ``[accepted]``, Slack's challenge)."""

    body: bytes
    content_type: str = "application/json"
    status: int = 200


@dataclass(frozen=True)
class Verified:
    """The outcome of a successful verification."""

    events: list[VerifiedEvent]
    scheme: str
    reply: Reply | None = None
    # For schemes whose signature covers neither the event id nor a timestamp (GitHub, Shopify,
    # Twilio, PayPal, generic hmac): a stable fingerprint of what was signed (see ``replay_key``).
    # The receiver stores it under a per-endpoint unique index, so one signature yields at most
    # one event; a second delivery with it but another id is a ``replayed_signature``.
    replay_key: str | None = None


@dataclass(frozen=True)
class ObjectRef:
    """The provider object an event moves, with a version that orders its states."""

    type: str
    id: str
    version: int
    state: Any


@dataclass(frozen=True)
class Missed:
    """One event listed by the provider's API (``Provider.missed``): verified by the API answering
    our key (one event, ``scheme`` of its own), its body as stored, and its creation time."""

    verified: Verified
    body: bytes
    created: int | None = None  # unix seconds


class Provider:
    """Base of every provider kind; subclasses override what differs."""

    kind: ClassVar[str]
    signature_header_names: ClassVar[tuple[str, ...]] = ()
    # The endpoint table's keys this kind understands beyond the common ones (``provider``, ``secrets``,
    # ``tolerance_seconds``, ``basic_auth``, ``rate_limit``, ``sender_rate_limit``): any other is a typo.
    option_names: ClassVar[frozenset[str]] = frozenset()
    # Its signature covers the URL it calls: a copy posted to another URL never verifies (``listen``).
    signs_url: ClassVar[bool] = False
    # How long the provider may retry one event, rounded up: ``webhooks purge`` keeps ids that long.
    retry_horizon: ClassVar[timedelta] = 30 * DAY
    # Environment shorthands: variable → endpoint field, for an endpoint named after the kind
    # (``STRIPE_WEBHOOK_SECRET`` → endpoint ``stripe``'s ``secrets``; comma-separated secrets).
    shorthands: ClassVar[Mapping[str, str]] = {}

    def validate(self, endpoint: Endpoint) -> None:
        """Raise ``ConfigError`` when the endpoint's secrets or options cannot work."""
        if not endpoint.secrets:
            raise ConfigError(f"endpoint {endpoint.name!r}: no secret configured (fail closed)")
        if not all(endpoint.secrets):
            # An empty key makes a MAC anyone can compute: refuse it, as standardwebhooks does.
            raise ConfigError(f"endpoint {endpoint.name!r}: an empty secret is no secret (fail closed)")

    def verify(self, request: Request, endpoint: Endpoint, *, now: float) -> Verified:
        raise NotImplementedError

    def issue_secret(self) -> str | None:
        """A fresh signing secret in the shape this kind verifies, where the receiver may choose it
        (the admin API's new secret without a ``value``); None: the provider issues its own."""
        return None

    def signs_nothing(self, endpoint: Endpoint) -> bool:
        """Whether anyone may post to ``endpoint`` (nothing a delivery carries is signed; the worker
        fetches what it names): such an endpoint gets a default ``rate_limit`` and
        ``sender_rate_limit`` (``config``). Default: every delivery is signed."""
        return False

    def signature_headers(self, endpoint: Endpoint) -> tuple[str, ...]:
        """The request headers that carry the signature (redacted where a stored one could be replayed)."""
        return self.signature_header_names

    def event_data(self, payload: bytes, index: int | None) -> Any:
        """The parsed event stored as ``payload`` (and ``index`` within a batch)."""
        data = parse_json(payload)
        return data if index is None else self.item(data, index)

    def item(self, data: Any, index: int) -> Any:
        """The event at ``index`` of a parsed multi-event body, as handlers see it: its
        ``batch_item``, or for a JSON array its element."""
        found = self.batch_item(data, index)
        return data[index] if found is None else found

    def batch_item(self, data: Any, index: int) -> Any:
        """The event's own item in a parsed batch body, shown beside it by the console (None: no batches)."""
        return None

    def extract(self, event_type: str, data: Any) -> ObjectRef | None:
        """The object this event moves, or None when it carries no object."""
        return None

    # -- capabilities; each default means "not supported" ------------------------------------

    # A ``GET /webhooks/<name>`` is a handshake this kind answers (Braintree's challenge): it is
    # verified with ``Request.method`` "GET" and answered with its ``Reply``, never stored. Other
    # kinds' endpoints answer a GET 405.
    answers_get: ClassVar[bool] = False

    # ``secret_index`` is a position in ``Endpoint.secrets``; False: it names something else (the
    # kind verifies with the provider's own key), so no stored secret is said to have matched.
    index_names_secret: ClassVar[bool] = True

    # The object's state is a fold of all its events (``fold``), not the newest event's snapshot.
    folds: ClassVar[bool] = False
    # The object type whose folded state may say ``gap: true`` (an event missing before the
    # others: ``/admin/gaps``); None: this kind has no gaps.
    gap_type: ClassVar[str | None] = None

    def fold(self, stored: Any, incoming: ObjectRef) -> ObjectRef:
        """``incoming`` merged into the ``stored`` state (None: nothing stored); asked only when
        ``folds``. A ``latest`` key in the merged state names the event the fold counts as newest."""
        raise NotImplementedError(f"{self.kind} does not fold its events")

    def refetch(
        self, endpoint: Endpoint, event_type: str, data: Any, ref: ObjectRef | None
    ) -> tuple[Any, ObjectRef | None]:
        """The data and object handlers see, re-fetched from the provider's API when the endpoint
        asks for it (worker side, before any lock; see ``jobs.fetch``): raise ``api.FetchError``
        to retry, ``api.MismatchError`` to fail at once. Default: as delivered."""
        return data, ref

    def calls_out(self, endpoint: Endpoint) -> bool:
        """Whether ``refetch`` may call the provider's API for ``endpoint``: its events are then
        processed in the endpoint's own lane (``webhooks.lanes``), off the shared worker."""
        return False

    # The endpoint option holding the credential ``missed`` lists events with (None: this kind
    # cannot reconcile); ``reconciles`` is whether an endpoint has it.
    reconcile_with: ClassVar[str | None] = None

    def reconciles(self, endpoint: Endpoint) -> bool:
        """Whether ``missed`` can list this endpoint's events from the provider's API."""
        return self.reconcile_with is not None and bool(endpoint.options.get(self.reconcile_with))

    def reconcile_every(self, endpoint: Endpoint) -> float | None:
        """Seconds between the workers' reconciliations of ``endpoint`` (None: not scheduled);
        ``validate`` refuses a value this cannot read."""
        return None

    def missed(self, endpoint: Endpoint, since: int, *, undelivered: bool = False) -> Iterator[Missed]:
        """Every event the provider's API lists as created at or after ``since`` (unix seconds);
        ``undelivered``: only those it has not delivered. ``api.ApiError`` when it cannot answer."""
        raise NotImplementedError(f"{self.kind} cannot list its events")

    def describe_version(self, version: int) -> str | None:
        """An object version of this kind in words (the inverse of ``extract``'s formula); None:
        no formula made it (shown as ``version N``)."""
        return None

    def amount(self, payload: bytes, index: int | None) -> tuple[int, str] | None:
        """The amount (minor units, ISO 4217 code) a stored event names, or None. ``payload`` and
        ``index`` as in ``event_data``."""
        return None

    def post_url(self, url: str, body: bytes) -> str:
        """The URL a delivery of ``body`` to ``url`` is posted to (Twilio adds ``bodySHA256``)."""
        return url

    def sign(
        self, endpoint: Endpoint, body: bytes, *, now: float, secret_index: int = 0, url: str = ""
    ) -> tuple[bytes, dict[str, str]]:
        """The body and headers the provider would send for ``body`` (some sign inside it)."""
        raise NotImplementedError(f"{self.kind} cannot sign")


# -- helpers shared by provider modules -------------------------------------------------------


def encode_item(item: Any) -> bytes:
    """One event's own item of a multi-event body, as stored in its row (``event_data`` of it
    with no index gives the item back): compact ASCII JSON, storable on every database."""
    return json.dumps(item, separators=(",", ":")).encode()


def require(request: Request, name: str) -> str:
    value = request.header(name)
    if value is None or not value.strip():
        raise VerificationError(Reason.MISSING_SIGNATURE, f"no {name} header")
    return value.strip()


def looks_like_json(body: bytes) -> bool:
    """Whether a body that may be JSON or a form is JSON (an object or an array)."""
    return body.lstrip()[:1] in (b"{", b"[")


def content_id(content: bytes) -> str:
    """The event id of a delivery that carries none: ``sha256:`` and the hex digest of what was signed."""
    return "sha256:" + hashlib.sha256(content).hexdigest()


def parse_json(body: bytes) -> Any:
    """The parsed body, or ``PayloadError`` (``malformed_payload``) for anything that is not JSON."""
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise PayloadError("body is not JSON") from exc
    except RecursionError as exc:  # ``[[[[…`` nested past the interpreter's recursion limit
        raise PayloadError("body is nested too deeply") from exc


def check_timestamp(raw: str, now: float, tolerance: int, *, both_ways: bool = True) -> int:
    """Parse a unix-seconds timestamp and enforce the replay window."""
    try:
        ts = int(raw)
    except ValueError as exc:
        raise VerificationError(Reason.MALFORMED_SIGNATURE, "timestamp is not an integer") from exc
    if now - ts > tolerance or (both_ways and ts - now > tolerance):
        raise VerificationError(Reason.TIMESTAMP_OUT_OF_TOLERANCE, f"skew {int(now - ts)} s")
    return ts


def hmac_digest(key: bytes, message: bytes, algorithm: str = "sha256") -> bytes:
    return hmac.new(key, message, getattr(hashlib, algorithm)).digest()


def prefixed_hex(value: str, prefix: str, header: str) -> bytes:
    """``<prefix>=<hex>`` (GitHub's ``sha256=…``, Slack's ``v0=…``) → the digest bytes."""
    scheme, sep, digest = value.partition("=")
    if not sep or scheme != prefix:
        raise VerificationError(Reason.MALFORMED_SIGNATURE, f"{header} is not {prefix}=<hex>")
    try:
        return bytes.fromhex(digest)
    except ValueError as exc:
        raise VerificationError(Reason.MALFORMED_SIGNATURE, "signature is not hex") from exc


DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def duration_seconds(text: str) -> float:
    """``30d``, ``12h``, ``90m``, ``3600s``, ``2w`` (or plain seconds); ``ValueError`` otherwise."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", str(text).lower())
    if not found:
        raise ValueError(f"not a duration: {text!r} (use e.g. 30d, 12h, 90m)")
    return float(found.group(1)) * DURATION_UNITS[found.group(2) or "s"]


def b64decode(value: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise VerificationError(Reason.MALFORMED_SIGNATURE, "not base64") from exc


def replay_key(*parts: bytes | str) -> str:
    """A fixed-width fingerprint of a verified signature (and what names it), for ``Verified.replay_key``."""
    digest = hashlib.sha256()
    for part in parts:
        raw = part.encode() if isinstance(part, str) else part
        digest.update(len(raw).to_bytes(8, "big") + raw)
    return digest.hexdigest()


def first_match(secrets: Iterable[str], expected: Callable[[str], bytes], candidates: Iterable[bytes]) -> int:
    """Index of the first secret whose expected signature equals any candidate (constant time).

    An empty digest or a candidate of another length never matches, whatever the caller passed:
    ``compare_digest(b"", b"")`` is true, and no real MAC is empty.
    """
    wanted = list(candidates)
    if not wanted:
        raise VerificationError(Reason.MISSING_SIGNATURE, "no signature of a supported scheme")
    for index, secret in enumerate(secrets):
        digest = expected(secret)
        if not digest:
            continue
        # Compare against every candidate, so timing says nothing about which one matched.
        if sum(len(c) == len(digest) and hmac.compare_digest(digest, c) for c in wanted):
            return index
    raise VerificationError(Reason.SIGNATURE_MISMATCH, "no configured secret matches")


# Signature entries one header may carry. Rotation sends one per live secret (two, briefly three);
# every entry beyond costs a comparison or an Ed25519/HMAC check, so a header over the cap is
# refused before any crypto. standardwebhooks and svix set no cap of their own.
MAX_SIGNATURES = 16


def capped_split(value: str, sep: str | None, name: str, cap: int = MAX_SIGNATURES) -> list[str]:
    """``value.split(sep)``, or ``too_many_signatures`` when it has more than ``cap`` entries."""
    parts = value.split(sep, cap)  # at most cap + 1 parts: the flood is never split in full
    if len(parts) > cap:
        raise VerificationError(Reason.TOO_MANY_SIGNATURES, f"{name} has more than {cap} entries")
    return parts


def timestamped_hex(header: str, sep: str, name: str, ts_key: str, sig_key: str) -> tuple[str | None, list[bytes], int]:
    """``ts=…<sep>h1=…`` headers (Stripe's ``t``/``v1``, Paddle's ``ts``/``h1``): the timestamp, the
    usable 32-byte hex signatures, and how many ``sig_key`` entries were unusable."""
    timestamp, signatures, unusable = None, [], 0
    for item in capped_split(header, sep, name):
        key, found, value = item.strip().partition("=")
        if found and key == ts_key:
            timestamp = value
        elif found and key == sig_key:
            try:
                signature = bytes.fromhex(value)
            except ValueError:
                signature = b""
            if len(signature) == 32:
                signatures.append(signature)
            else:
                unusable += 1
    return timestamp, signatures, unusable
