"""Amazon SNS (HTTP/S subscriptions): the signature is inside the JSON body.

Signed string: for each field present, in this order, ``f"{name}\\n{value}\\n"``: a ``Notification``
signs ``Message``, ``MessageId``, ``Subject`` (when present and not null), ``Timestamp``,
``TopicArn``, ``Type``; a ``SubscriptionConfirmation`` or ``UnsubscribeConfirmation`` signs
``Message``, ``MessageId``, ``SubscribeURL``, ``Timestamp``, ``Token``, ``TopicArn``, ``Type``.
``Signature`` (base64) is RSA PKCS#1 v1.5 with SHA-1 (``SignatureVersion`` ``1``) or SHA-256
(``2``) under the X.509 certificate at ``SigningCertURL``, which must be
``https://sns.<region>.amazonaws.com/SimpleNotificationService-<id>.pem`` in the topic's own region
(else ``url_mismatch``, before any fetch). ``secrets`` are unused (SNS signs with its key): the
endpoint names the topics it accepts, ``options["topic_arns"]`` (a string or a list, required: any
AWS account can sign a message of its own topic to this URL). The PEM comes pinned
(``options["certificate"]``) or from ``cert_loader(url)``: injected, so this module does no I/O; the
real one lives in ``sns_certs`` (SNS hosts only, chain check, cache, budgets). Replay window:
``Timestamp`` (ISO 8601, signed) within ``tolerance_seconds`` of ``now`` both ways; SNS retries a
message unchanged, so the window must outlast the topic's delivery policy (default policy: about a
minute). The ``x-amz-sns-*`` headers are not signed and never read. Event id: ``MessageId``
(signed); type: ``Type`` (``Notification``, ``UnsubscribeConfirmation``); both signed, so no replay
key. A verified ``SubscriptionConfirmation`` is confirmed by GETting its ``SubscribeURL``
(``confirmer``, host-pinned to the topic's region, its topic and token) and answered, never stored;
``options["confirm"] = false`` answers it without confirming. No object and no version: a
notification's ``Message`` is the publisher's opaque string. ``sign`` (tests, ``webhooks send``) needs
``options["signing_key"]``: a PEM private key matching the pinned certificate.
Docs: https://docs.aws.amazon.com/sns/latest/dg/sns-verify-signature-of-message.html
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
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
    Provider,
    Reply,
    Request,
    Verified,
    VerifiedEvent,
    b64decode,
    parse_json,
)
from webhooks.providers.fields import iso_ms
from webhooks.providers.signing_keys import private_key
from webhooks.providers.sns_hosts import cert_region, is_subscribe_url, topic_region
from webhooks.vocabulary import Reason

Loader = Callable[..., bytes]  # (url, sender) -> PEM
Confirm = Callable[[str], None]  # a SubscribeURL -> confirmed, or an error
DEFAULT_CERT_URL = "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-test.pem"
NOTIFICATION = ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type")
CONFIRMATION = ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type")
FIELDS = {
    "Notification": NOTIFICATION,
    "SubscriptionConfirmation": CONFIRMATION,
    "UnsubscribeConfirmation": CONFIRMATION,
}
HASHES: dict[str, Callable[[], hashes.HashAlgorithm]] = {"1": hashes.SHA1, "2": hashes.SHA256}
CONFIRMED = b'{"confirmed":true}'
RSA_BYTES = (128, 1024)  # the signature is as long as the key's modulus (RSA-1024 to RSA-8192)


def signed_string(message: dict[str, Any]) -> bytes:
    """The string SNS signs for ``message`` (``PayloadError`` when a field it signs is missing)."""
    kind = message.get("Type")
    if kind not in FIELDS:
        raise PayloadError("Type is not Notification, SubscriptionConfirmation or UnsubscribeConfirmation")
    parts = []
    for name in FIELDS[kind]:
        value = message.get(name)
        if name == "Subject" and value is None:
            continue  # signed only when present
        if not isinstance(value, str):
            raise PayloadError(f"no {name} (a string)")
        parts.append(f"{name}\n{value}\n")
    return "".join(parts).encode()


def _timestamp(value: str, now: float, tolerance: int) -> int:
    """``Timestamp`` as unix seconds, refused outside ``now ± tolerance``."""
    ms = iso_ms(value)
    if ms is None:
        raise VerificationError(Reason.MALFORMED_SIGNATURE, "Timestamp is not ISO 8601")
    if abs(now - ms / 1000) > tolerance:
        raise VerificationError(Reason.TIMESTAMP_OUT_OF_TOLERANCE, f"skew {int(now - ms / 1000)} s")
    return ms // 1000


def _topics(endpoint: Endpoint) -> list[str]:
    value = endpoint.options.get("topic_arns")
    return [value] if isinstance(value, str) else list(value) if isinstance(value, list | tuple) else []


class Sns(Provider):
    kind = "sns"
    index_names_secret = False  # SNS signs with its key; ``secrets`` are unused
    retry_horizon = 1 * DAY  # a delivery policy retries for at most an hour (numRetries × maxDelayTarget)
    option_names = frozenset({"topic_arns", "certificate", "cert_url", "signing_key", "confirm"})
    signature_header_names = ()  # the signature is in the body

    def __init__(self, cert_loader: Loader | None = None, confirmer: Confirm | None = None) -> None:
        self.cert_loader, self.confirmer = cert_loader, confirmer

    def validate(self, endpoint: Endpoint) -> None:
        topics = _topics(endpoint)
        if not topics or not all(isinstance(t, str) and topic_region(t) for t in topics):
            raise ConfigError(
                f"endpoint {endpoint.name!r}: options.topic_arns (an SNS topic ARN or a list) is required (fail closed)"
            )
        try:
            if endpoint.options.get("certificate"):
                x509.load_pem_x509_certificates(str(endpoint.options["certificate"]).encode())
        except ValueError as exc:
            raise ConfigError(f"endpoint {endpoint.name!r}: options.certificate is not a PEM certificate") from exc
        if not isinstance(endpoint.options.get("confirm", True), bool):
            raise ConfigError(f"endpoint {endpoint.name!r}: options.confirm is true or false")

    def _certificate(self, endpoint: Endpoint, url: str, sender: str) -> x509.Certificate:
        if endpoint.options.get("certificate"):
            pem = str(endpoint.options["certificate"]).encode()
        elif self.cert_loader is not None:
            pem = self.cert_loader(url, sender)
        else:  # imported late: the default does I/O, which this module must not do at import or by itself
            from webhooks.providers import sns_certs

            pem = sns_certs.default_loader(url, sender)
        try:
            return x509.load_pem_x509_certificates(pem)[0]
        except ValueError as exc:
            raise VerificationError(Reason.SIGNATURE_MISMATCH, "certificate does not parse") from exc

    def verify(self, request: Request, endpoint: Endpoint, *, now: float) -> Verified:
        message = parse_json(request.body)
        if not isinstance(message, dict):
            raise PayloadError("body is not an SNS message")
        raw, version = message.get("Signature"), message.get("SignatureVersion")
        cert_url = message.get("SigningCertURL")
        if not isinstance(raw, str) or not raw:
            raise VerificationError(Reason.MISSING_SIGNATURE, "no Signature")
        if version not in HASHES:
            raise VerificationError(Reason.MALFORMED_SIGNATURE, "SignatureVersion is not 1 or 2")
        signature = b64decode(raw)
        if not RSA_BYTES[0] <= len(signature) <= RSA_BYTES[1]:
            raise VerificationError(Reason.MALFORMED_SIGNATURE, "Signature is not an RSA signature")
        signed = signed_string(message)
        topic = message["TopicArn"]
        region = cert_region(cert_url) if isinstance(cert_url, str) else None
        if not isinstance(cert_url, str) or region is None or region != topic_region(topic):
            raise VerificationError(Reason.URL_MISMATCH, "SigningCertURL is not SNS's in the topic's region")
        if topic not in _topics(endpoint):
            raise VerificationError(Reason.SIGNATURE_MISMATCH, "TopicArn is not one of options.topic_arns")
        signed_at = _timestamp(message["Timestamp"], now, endpoint.tolerance_seconds)
        cert = self._certificate(endpoint, cert_url, request.sender)
        if not cert.not_valid_before_utc <= datetime.fromtimestamp(now, UTC) <= cert.not_valid_after_utc:
            raise VerificationError(Reason.SIGNATURE_MISMATCH, "certificate is not valid now")
        key = cert.public_key()
        if not isinstance(key, rsa.RSAPublicKey):
            raise VerificationError(Reason.SIGNATURE_MISMATCH, "certificate key is not RSA")
        try:
            key.verify(signature, signed, padding.PKCS1v15(), HASHES[version]())
        except InvalidSignature:
            raise VerificationError(Reason.SIGNATURE_MISMATCH, "signature does not verify") from None
        scheme = f"sns-v{version}"
        if message["Type"] == "SubscriptionConfirmation":
            return Verified([], scheme, self._confirm(endpoint, message))
        event = VerifiedEvent(message["MessageId"], message["Type"], signed_at=signed_at, reference=topic)
        return Verified([event], scheme)

    def _confirm(self, endpoint: Endpoint, message: dict[str, Any]) -> Reply:
        """Confirm a verified subscription (unless ``confirm`` is false): never stored as an event."""
        url = message["SubscribeURL"]
        if not is_subscribe_url(url, message["TopicArn"], message["Token"]):
            raise VerificationError(Reason.URL_MISMATCH, "SubscribeURL is not SNS's for this topic and token")
        if not endpoint.options.get("confirm", True):
            return Reply(b'{"confirmed":false}')
        if self.confirmer is not None:
            self.confirmer(url)
        else:
            from webhooks.providers import sns_certs

            sns_certs.default_confirmer(url)
        return Reply(CONFIRMED)

    def sign(
        self, endpoint: Endpoint, body: bytes, *, now: float, secret_index: int = 0, url: str = ""
    ) -> tuple[bytes, dict[str, str]]:
        """Re-sign the message in ``body`` as SNS would now (``Timestamp``, ``SigningCertURL``, ``Signature``);
        a body that is no SNS message is published as the ``Message`` of a notification to the first topic."""
        encoded = endpoint.options.get("signing_key")
        if not encoded:
            raise NotImplementedError("sns signs with Amazon's key: set options.signing_key (PEM) to sign")
        key = private_key(str(encoded))
        if not isinstance(key, rsa.RSAPrivateKey):
            raise ValueError("options.signing_key is not an RSA private key")
        try:
            message = parse_json(body)
        except PayloadError:
            message = None
        if not isinstance(message, dict) or message.get("Type") not in FIELDS:
            message = {
                "Type": "Notification",
                "MessageId": str(uuid.UUID(bytes=hashlib.sha256(body).digest()[:16])),
                "TopicArn": _topics(endpoint)[0],
                "Message": body.decode("utf-8", "replace"),
            }
        moment = datetime.fromtimestamp(now, UTC)
        message["Timestamp"] = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
        version = str(message.get("SignatureVersion") or "1")
        message["SignatureVersion"] = version
        message["SigningCertURL"] = str(endpoint.options.get("cert_url", DEFAULT_CERT_URL))
        digest = HASHES[version]()
        message["Signature"] = base64.b64encode(key.sign(signed_string(message), padding.PKCS1v15(), digest)).decode()
        headers = {
            "x-amz-sns-message-type": str(message["Type"]),
            "x-amz-sns-message-id": str(message["MessageId"]),
            "x-amz-sns-topic-arn": str(message["TopicArn"]),
            "Content-Type": "text/plain; charset=UTF-8",
        }
        return json.dumps(message, indent=2).encode(), headers
