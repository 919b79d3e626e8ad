"""SendGrid Event Webhook: ``X-Twilio-Email-Event-Webhook-Signature`` and ``-Timestamp``.

Signed bytes: ``timestamp + body`` (the raw body, trailing ``\\r\\n`` included); ECDSA P-256 with
SHA-256; the signature is base64 of a DER ``Ecdsa-Sig-Value``. Key: the verification key from
Mail Settings, base64 DER SubjectPublicKeyInfo, one per entry of ``secrets`` (several = rotation).
SendGrid documents no replay window: the timestamp is checked against ``tolerance_seconds`` only
when ``options["check_timestamp"]`` is true (then before any ECDSA check); a signature longer than a
P-256 DER signature (72 bytes) is ``malformed_signature`` before any key is tried. The body (with
each ``sg_event_id``) is signed: no replay key.
The body is a JSON array: one event per element, ``index`` = its position, id = ``sg_event_id``,
type = ``event`` (``processed``, ``delivered``, ``open``…). Object: the message
(``sg_message_id``), versioned by the event's ``timestamp`` in ms.
``sign`` (tests, ``webhooks send``) needs ``options["signing_key"]``: a base64 DER PKCS#8 P-256
private key. SendGrid never gives one out; configure it only for a test endpoint.
Docs: https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/getting-started-event-webhook-security-features
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_der_private_key, load_der_public_key

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
    check_timestamp,
    parse_json,
    require,
)
from webhooks.vocabulary import Reason

SIGNATURE = "X-Twilio-Email-Event-Webhook-Signature"
TIMESTAMP = "X-Twilio-Email-Event-Webhook-Timestamp"
ECDSA = ec.ECDSA(hashes.SHA256())
MAX_DER = 72  # SEQUENCE of two INTEGERs of at most 33 bytes each: a P-256 signature is never longer


def public_key(secret: str) -> ec.EllipticCurvePublicKey:
    key = load_der_public_key(base64.b64decode(secret, validate=True))
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp256r1":
        raise ValueError("not a P-256 public key")
    return key


class SendGrid(Provider):
    kind = "sendgrid"
    retry_horizon = 2 * DAY  # retries for 24 hours
    shorthands = {"SENDGRID_WEBHOOK_PUBLIC_KEY": "secrets"}
    option_names = frozenset({"check_timestamp", "signing_key"})

    def validate(self, endpoint: Endpoint) -> None:
        super().validate(endpoint)
        try:
            for secret in endpoint.secrets:
                public_key(secret)
        except (binascii.Error, ValueError) as exc:
            raise ConfigError(f"endpoint {endpoint.name!r}: a secret is not a base64 DER P-256 public key") from exc

    def verify(self, request: Request, endpoint: Endpoint, *, now: float) -> Verified:
        signature = b64decode(require(request, SIGNATURE))
        if not 8 <= len(signature) <= MAX_DER:
            raise VerificationError(Reason.MALFORMED_SIGNATURE, f"{SIGNATURE} is not a P-256 DER signature")
        timestamp = require(request, TIMESTAMP)
        if endpoint.options.get("check_timestamp"):
            signed_at: int | None = check_timestamp(timestamp, now, endpoint.tolerance_seconds)
        else:
            signed_at = int(timestamp) if timestamp.isascii() and timestamp.isdigit() else None
        signed = timestamp.encode() + request.body
        index = next((i for i, s in enumerate(endpoint.secrets) if self._valid(s, signature, signed)), None)
        if index is None:
            raise VerificationError(Reason.SIGNATURE_MISMATCH, "no configured public key verifies the signature")
        events = parse_json(request.body)
        if not isinstance(events, list) or not events:
            raise PayloadError("body is not a non-empty JSON array")
        verified = []
        for position, event in enumerate(events):
            event_id = event.get("sg_event_id") if isinstance(event, dict) else None
            if not isinstance(event_id, str) or not event_id or not isinstance(event.get("event"), str):
                raise PayloadError(f"event {position} has no sg_event_id or event")
            verified.append(VerifiedEvent(event_id, event["event"], position, index, signed_at))
        return Verified(verified, "sendgrid-ecdsa")

    @staticmethod
    def _valid(secret: str, signature: bytes, signed: bytes) -> bool:
        try:
            public_key(secret).verify(signature, signed, ECDSA)
        except InvalidSignature:
            return False
        return True

    def extract(self, event_type: str, data: Any) -> ObjectRef | None:
        message, ts = data.get("sg_message_id"), data.get("timestamp")
        if not isinstance(message, str) or not isinstance(ts, int) or isinstance(ts, bool):
            return None
        return ObjectRef("message", message, ts * 1000, data)

    def sign(
        self, endpoint: Endpoint, body: bytes, *, now: float, secret_index: int = 0, url: str = ""
    ) -> tuple[bytes, dict[str, str]]:
        encoded = endpoint.options.get("signing_key")
        if not encoded:
            raise NotImplementedError(
                "sendgrid signs with SendGrid's private key: set options.signing_key (base64 DER PKCS#8) to sign"
            )
        key = load_der_private_key(base64.b64decode(str(encoded)), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("options.signing_key is not an EC private key")
        ts = str(int(now))
        signature = key.sign(ts.encode() + body, ECDSA)
        return body, {
            SIGNATURE: base64.b64encode(signature).decode(),
            TIMESTAMP: ts,
            "Content-Type": "application/json",
        }
