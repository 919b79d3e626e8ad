"""PayPal: ``PAYPAL-TRANSMISSION-ID``, ``-TIME``, ``-SIG``, ``-CERT-URL``, ``-AUTH-ALGO``.

Signed string: ``f"{transmission_id}|{transmission_time}|{webhook_id}|{crc32(body)}"`` (CRC-32 of the
raw body, unsigned decimal); ``webhook_id`` is ours: ``options["webhook_id"]``, a string or a list (one
URL, several webhooks; ``secret_index`` = the one matched). ``secrets`` are unused: PayPal signs with its key.
``SHA256withRSA`` (PKCS#1 v1.5) with the X.509 certificate at ``PAYPAL-CERT-URL`` (a PayPal URL, else
``url_mismatch``), valid at ``now``; base64. The PEM comes pinned (``options["certificate"]``, or
``options["cert_file"]`` via ``pinned_reader``) or from ``cert_loader(url)``: both injected, so this
module does no I/O; the real ones live in ``paypal_certs`` (PayPal hosts only, chain check, cache).
Replay window: ``PAYPAL-TRANSMISSION-TIME`` (ISO 8601, signed) within ``tolerance_seconds`` of ``now``
both ways, checked before any certificate is fetched, as are the headers' shapes (a signature of
128 to 1024 bytes, RSA-1024 to RSA-8192) and the certificate URL's; unparsable is ``malformed_signature``. The body
is covered only by its CRC-32 (forgeable): the replay key is the transmission id, so one signature
yields one event. Event id: the body's ``id`` (``WH-…``); type: ``event_type``. Object:
``resource_type``/``resource.id``, versioned by ``resource.update_time`` (or ``create_time``).
``sign`` (tests only) needs ``options["signing_key"]``: a PEM private key matching the pinned certificate.
Docs: https://developer.paypal.com/api/rest/webhooks/rest/#link-eventheadervalidation
"""

from __future__ import annotations

import base64
import hashlib
import uuid
import zlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from webhooks.errors import ConfigError, PayloadError, VerificationError
from webhooks.providers.base import (
    DAY,
    Endpoint,
    ObjectRef,
    Provider,
    Request,
    Verified,
    VerifiedEvent,
    b64decode,
    parse_json,
    replay_key,
    require,
)
from webhooks.providers.fields import iso_ms, updated_text
from webhooks.providers.paypal_hosts import is_paypal_cert_url
from webhooks.providers.signing_keys import private_key
from webhooks.vocabulary import Reason

Loader = Callable[[str], bytes]  # a URL (or a pinned file's path) -> PEM
DEFAULT_CERT_URL = "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-test"
RSA_BYTES = (128, 1024)  # the signature is as long as the key's modulus


def signed_string(transmission_id: str, time: str, webhook_id: str, body: bytes) -> bytes:
    return f"{transmission_id}|{time}|{webhook_id}|{zlib.crc32(body) & 0xFFFFFFFF}".encode()


def transmission_time(value: str, now: float, tolerance: int) -> int:
    """``PAYPAL-TRANSMISSION-TIME`` as unix seconds, refused outside ``now ± tolerance``."""
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        ts = int((moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp())
    except (ValueError, OverflowError) as exc:
        raise VerificationError(Reason.MALFORMED_SIGNATURE, "PAYPAL-TRANSMISSION-TIME is not ISO 8601") from exc
    if abs(now - ts) > tolerance:
        raise VerificationError(Reason.TIMESTAMP_OUT_OF_TOLERANCE, f"skew {int(now - ts)} s")
    return ts


def _webhook_ids(endpoint: Endpoint) -> list[str]:
    value = endpoint.options.get("webhook_id")
    return [value] if isinstance(value, str) else list(value) if isinstance(value, list | tuple) else []


def _verifies(key: rsa.RSAPublicKey, signature: bytes, message: bytes) -> bool:
    try:
        key.verify(signature, message, padding.PKCS1v15(), hashes.SHA256())
    except InvalidSignature:
        return False
    return True


class PayPal(Provider):
    kind = "paypal"
    index_names_secret = False  # the index is the webhook id's: PayPal signs with its own key
    retry_horizon = 3 * DAY  # up to 25 times over 3 days
    option_names = frozenset(
        {
            "webhook_id",
            "certificate",
            "cert_file",
            "cert_url",
            "signing_key",
            "client_id",
            "client_secret",
            "api_base",
        }
    )
    signature_header_names = ("PAYPAL-TRANSMISSION-SIG",)

    def __init__(self, cert_loader: Loader | None = None, pinned_reader: Loader | None = None) -> None:
        self.cert_loader, self.pinned_reader = cert_loader, pinned_reader

    def validate(self, endpoint: Endpoint) -> None:
        ids = _webhook_ids(endpoint)
        if not ids or not all(isinstance(i, str) and i for i in ids):
            raise ConfigError(f"endpoint {endpoint.name!r}: options.webhook_id (string or list) is required")
        try:
            if endpoint.options.get("certificate"):
                x509.load_pem_x509_certificates(str(endpoint.options["certificate"]).encode())
        except ValueError as exc:
            raise ConfigError(f"endpoint {endpoint.name!r}: options.certificate is not a PEM certificate") from exc
        if "api_base" in endpoint.options:  # the client secret goes there: PayPal's hosts only
            from webhooks.providers import api  # no I/O: only its host check

            api.check_base(
                endpoint.name, endpoint.options["api_base"], ("api-m.paypal.com", "api-m.sandbox.paypal.com")
            )

    def _certificate(self, endpoint: Endpoint, url: str, sender: str = "") -> x509.Certificate:
        # Imported late: the defaults do I/O, which this module must not do at import or by itself.
        from webhooks.providers import paypal_certs

        if endpoint.options.get("certificate"):
            pem = str(endpoint.options["certificate"]).encode()
        elif endpoint.options.get("cert_file"):
            pem = (self.pinned_reader or paypal_certs.read_pinned)(str(endpoint.options["cert_file"]))
        elif self.cert_loader is not None:
            pem = self.cert_loader(url)
        else:  # the shared loader also budgets its fetches per sender
            pem = paypal_certs.default_loader(url, sender)
        try:
            return x509.load_pem_x509_certificates(pem)[0]
        except ValueError as exc:
            raise VerificationError(Reason.SIGNATURE_MISMATCH, "certificate does not parse") from exc

    def verify(self, request: Request, endpoint: Endpoint, *, now: float) -> Verified:
        transmission_id = require(request, "PAYPAL-TRANSMISSION-ID")
        time = require(request, "PAYPAL-TRANSMISSION-TIME")
        signature = b64decode(require(request, "PAYPAL-TRANSMISSION-SIG"))
        if not RSA_BYTES[0] <= len(signature) <= RSA_BYTES[1]:
            raise VerificationError(Reason.MALFORMED_SIGNATURE, "PAYPAL-TRANSMISSION-SIG is not an RSA signature")
        cert_url = require(request, "PAYPAL-CERT-URL")
        if require(request, "PAYPAL-AUTH-ALGO").upper() != "SHA256WITHRSA":
            raise VerificationError(Reason.MALFORMED_SIGNATURE, "PAYPAL-AUTH-ALGO is not SHA256withRSA")
        if not is_paypal_cert_url(cert_url):
            raise VerificationError(Reason.URL_MISMATCH, "PAYPAL-CERT-URL is not a PayPal certificate URL")
        signed_at = transmission_time(time, now, endpoint.tolerance_seconds)
        cert = self._certificate(endpoint, cert_url, request.sender)
        moment = datetime.fromtimestamp(now, UTC)
        if not cert.not_valid_before_utc <= moment <= cert.not_valid_after_utc:
            raise VerificationError(Reason.SIGNATURE_MISMATCH, "certificate is not valid now")
        key = cert.public_key()
        if not isinstance(key, rsa.RSAPublicKey):
            raise VerificationError(Reason.SIGNATURE_MISMATCH, "certificate key is not RSA")
        messages = [signed_string(transmission_id, time, w, request.body) for w in _webhook_ids(endpoint)]
        index = next((i for i, message in enumerate(messages) if _verifies(key, signature, message)), None)
        if index is None:
            raise VerificationError(Reason.SIGNATURE_MISMATCH, "signature does not verify for any webhook_id")
        event = parse_json(request.body)
        if not isinstance(event, dict) or not event.get("id") or not isinstance(event.get("event_type"), str):
            raise PayloadError("no event id or event_type")
        event_id, event_type = str(event["id"]), event["event_type"]
        return Verified(
            [VerifiedEvent(event_id, event_type, secret_index=index, signed_at=signed_at)],
            "paypal-rsa-sha256",
            replay_key=replay_key("paypal", transmission_id),
        )

    def refetch(
        self, endpoint: Endpoint, event_type: str, data: Any, ref: ObjectRef | None
    ) -> tuple[Any, ObjectRef | None]:
        """With ``client_id`` and ``client_secret``: only PayPal's own copy of the event is acted on."""
        if not (endpoint.options.get("client_id") and endpoint.options.get("client_secret")):
            return data, ref
        from webhooks.providers import paypal_api  # the API client is worker-side I/O, loaded only here

        copy = paypal_api.event(endpoint, data)
        return copy, self.extract(event_type, copy)

    def calls_out(self, endpoint: Endpoint) -> bool:
        return bool(endpoint.options.get("client_id") and endpoint.options.get("client_secret"))

    def describe_version(self, version: int) -> str | None:
        return updated_text(version)

    def extract(self, event_type: str, data: Any) -> ObjectRef | None:
        resource = data.get("resource")
        if not isinstance(resource, dict) or not resource.get("id") or not data.get("resource_type"):
            return None
        version = iso_ms(resource.get("update_time") or resource.get("create_time")) or 0
        return ObjectRef(str(data["resource_type"]), str(resource["id"]), version, resource)

    def sign(
        self, endpoint: Endpoint, body: bytes, *, now: float, secret_index: int = 0, url: str = ""
    ) -> tuple[bytes, dict[str, str]]:
        encoded = endpoint.options.get("signing_key")
        if not encoded:
            raise NotImplementedError("paypal signs with PayPal's key: set options.signing_key (PEM) to sign")
        key = private_key(str(encoded))
        if not isinstance(key, rsa.RSAPrivateKey):
            raise ValueError("options.signing_key is not an RSA private key")
        transmission_id = str(uuid.UUID(bytes=hashlib.sha256(str(int(now)).encode() + body).digest()[:16]))
        time = datetime.fromtimestamp(int(now), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        signed = signed_string(transmission_id, time, _webhook_ids(endpoint)[secret_index], body)
        signature = base64.b64encode(key.sign(signed, padding.PKCS1v15(), hashes.SHA256())).decode()
        return body, {
            "PAYPAL-TRANSMISSION-ID": transmission_id,
            "PAYPAL-TRANSMISSION-TIME": time,
            "PAYPAL-TRANSMISSION-SIG": signature,
            "PAYPAL-CERT-URL": str(endpoint.options.get("cert_url", DEFAULT_CERT_URL)),
            "PAYPAL-AUTH-ALGO": "SHA256withRSA",
            "Content-Type": "application/json",
        }
