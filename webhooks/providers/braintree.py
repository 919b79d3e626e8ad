"""Braintree: a form body ``bt_signature=<public key>|<hex>&bt_payload=<base64 XML>``.

Signed bytes: the ``bt_payload`` text as posted (base64 of the notification's XML, newlines
included); HMAC-SHA1 keyed with the SHA-1 digest of the API private key; hex. ``bt_signature`` is
``<public key>|<hex>`` pairs joined by ``&`` (one per API key of the merchant): the pair of a
configured public key is checked, and, as braintree-python does, a signature of the payload with
a newline added verifies too. Secrets: ``<public key>:<private key>`` (one per API key pair; two
during a key rotation). A payload of characters outside base64 and ``\\n`` is ``malformed_signature``.
The notification's ``timestamp`` is signed (inside the XML): one older than ``retry_horizon``
(Braintree retries hourly for 24 hours) or ahead by more than ``tolerance_seconds`` is
``timestamp_out_of_tolerance``, so a purged event is never replayed in as new.
Event id: ``sha256:<hex of the decoded XML>`` (Braintree sends no id; a retry re-sends the same
payload). The id is a hash of signed bytes, so a re-labelled signature (other pairs, another URL)
is the same event: no replay key. Type: the notification's ``kind``
(``subscription_charged_successfully``). Object: the subject's element (``subscription``,
``transaction``, ``dispute``…) and its ``id``; version: its ``updated-at`` in ms, else the
notification's timestamp. No amount is given (Braintree's amounts are decimal strings).
The verification challenge: a ``GET`` with ``?bt_challenge=<hex>`` is answered
``<public key>|<hex HMAC-SHA1 of the challenge>`` (braintree's ``WebhookNotification.verify``)
with the first secret, and stores nothing. XML is parsed only after the signature holds, and a
document type (entities) is refused.
Docs: https://developer.paypal.com/braintree/docs/guides/webhooks/parse
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from webhooks.errors import ConfigError, PayloadError, VerificationError
from webhooks.providers.base import (
    DAY,
    Endpoint,
    ObjectRef,
    Provider,
    Reply,
    Request,
    Verified,
    VerifiedEvent,
    capped_split,
    content_id,
)
from webhooks.providers.fields import iso_ms, updated_text
from webhooks.vocabulary import Reason

SCHEME = "braintree-sha1"
PUBLIC_KEY = re.compile(r"[A-Za-z0-9_-]+")
PAYLOAD = re.compile(r"[A-Za-z0-9+=/\n]+")
CHALLENGE = re.compile(r"[a-f0-9]{20,32}")  # braintree-python's InvalidChallengeError otherwise
MAX_FIELDS = 16  # Braintree posts two
TIMESTAMP = re.compile(rb'<timestamp type="datetime">[^<]*</timestamp>')


def keys(secret: str) -> tuple[str, str]:
    """``<public key>:<private key>`` → both."""
    public, _, private = secret.partition(":")
    return public, private


def mac(private_key: str, message: bytes) -> str:
    """braintree-python's ``Crypto.sha1_hmac_hash``: the key is the SHA-1 digest of the private key."""
    return hmac.new(hashlib.sha1(private_key.encode()).digest(), message, hashlib.sha1).hexdigest()


def parse_form(body: bytes) -> dict[str, list[str]]:
    try:
        return parse_qs(body.decode("ascii"), keep_blank_values=True, max_num_fields=MAX_FIELDS)
    except UnicodeDecodeError as exc:
        raise VerificationError(Reason.MALFORMED_SIGNATURE, "form body is not ASCII") from exc
    except ValueError as exc:
        raise VerificationError(Reason.TOO_MANY_PARAMETERS, f"more than {MAX_FIELDS} form fields") from exc


def _field(form: dict[str, list[str]], name: str) -> str:
    values = form.get(name)
    if not values or not values[0]:
        raise VerificationError(Reason.MISSING_SIGNATURE, f"no {name}")
    if len(values) > 1:
        raise VerificationError(Reason.MALFORMED_SIGNATURE, f"{name} given twice")
    return values[0]


def decode(payload: str) -> bytes:
    """The notification XML of a verified ``bt_payload``; a document type is refused."""
    try:
        xml = base64.decodebytes(payload.encode())
    except binascii.Error as exc:
        raise PayloadError("bt_payload is not base64") from exc
    if b"<!" in xml:  # a DOCTYPE or an ENTITY: never expanded
        raise PayloadError("notification declares a document type")
    return xml


def _value(element: ET.Element) -> Any:
    """Braintree's XML as JSON-like values (``type`` attributes honoured, dashes as underscores)."""
    kind = element.get("type")
    if element.get("nil") == "true":
        return None
    if kind == "array":
        return [_value(child) for child in element]
    if len(element):
        return {child.tag.replace("-", "_"): _value(child) for child in element}
    text = (element.text or "").strip()
    if kind == "integer":
        try:
            return int(text)
        except ValueError:
            return text
    if kind == "boolean":
        return text == "true"
    return text


def notification(xml: bytes) -> dict[str, Any]:
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as exc:
        raise PayloadError("bt_payload is not XML") from exc
    data = _value(root)
    if root.tag != "notification" or not isinstance(data, dict):
        raise PayloadError("bt_payload is not a notification")
    return data


def subject(data: Any) -> tuple[str, dict[str, Any]] | None:
    """(type, object) of the notification's subject, when it is an object with an id."""
    found = data.get("subject") if isinstance(data, dict) else None
    for name, value in found.items() if isinstance(found, dict) else ():
        if isinstance(value, dict) and isinstance(value.get("id"), str) and value["id"]:
            return name, value
    return None


class Braintree(Provider):
    kind = "braintree"
    retry_horizon = 2 * DAY  # retried hourly for 24 hours
    shorthands = {"BRAINTREE_WEBHOOK_SECRET": "secrets"}
    signature_header_names = ()  # the signature is in the body
    answers_get = True  # the verification challenge

    def validate(self, endpoint: Endpoint) -> None:
        super().validate(endpoint)
        for secret in endpoint.secrets:
            public, private = keys(secret)
            if not PUBLIC_KEY.fullmatch(public) or not private or private != private.strip():
                raise ConfigError(
                    f"endpoint {endpoint.name!r}: a braintree secret is <public key>:<private key> (fail closed)"
                )

    def verify(self, request: Request, endpoint: Endpoint, *, now: float) -> Verified:
        if request.method == "GET":
            return self._challenge(request, endpoint)
        form = parse_form(request.body)
        signature, payload = _field(form, "bt_signature"), _field(form, "bt_payload")
        if not PAYLOAD.fullmatch(payload):
            raise VerificationError(Reason.MALFORMED_SIGNATURE, "bt_payload has characters outside base64")
        by_key: dict[str, str] = {}
        for pair in capped_split(signature, "&", "bt_signature"):
            if "|" in pair:  # the first pair of a public key counts, as in braintree-python
                by_key.setdefault(*pair.split("|")[:2])
        if not by_key:
            raise VerificationError(Reason.MALFORMED_SIGNATURE, "bt_signature has no <public key>|<hex> pair")
        index = self._match(endpoint.secrets, by_key, payload)
        xml = decode(payload)
        data = notification(xml)
        event_type = data.get("kind")
        if not isinstance(event_type, str) or not event_type:
            raise PayloadError("notification without a kind")
        signed_at = iso_ms(data.get("timestamp"))
        if signed_at is None:
            raise PayloadError("notification without a timestamp")
        age = now - signed_at / 1000
        if age > self.retry_horizon.total_seconds() or -age > endpoint.tolerance_seconds:
            raise VerificationError(Reason.TIMESTAMP_OUT_OF_TOLERANCE, f"notification is {int(age)} s old")
        found = subject(data)
        event = VerifiedEvent(
            content_id(xml),
            event_type,
            secret_index=index,
            signed_at=signed_at // 1000,
            object_id=found[1]["id"] if found else None,
        )
        return Verified([event], SCHEME)

    @staticmethod
    def _match(secrets: tuple[str, ...], by_key: dict[str, str], payload: str) -> int:
        """The index of the secret whose public key signed ``payload`` (or it and a newline)."""
        known = False
        for index, secret in enumerate(secrets):
            public, private = keys(secret)
            if public not in by_key:
                continue
            known = True
            given = by_key[public].encode()
            expected = (mac(private, payload.encode()), mac(private, payload.encode() + b"\n"))
            if sum(hmac.compare_digest(e.encode(), given) for e in expected):
                return index
        if not known:
            raise VerificationError(Reason.SIGNATURE_MISMATCH, "no pair of a configured public key")
        raise VerificationError(Reason.SIGNATURE_MISMATCH, "no configured secret matches")

    @staticmethod
    def _challenge(request: Request, endpoint: Endpoint) -> Verified:
        try:
            values = parse_qs(urlsplit(request.url).query).get("bt_challenge", [])
        except ValueError as exc:
            raise PayloadError("request URL does not parse") from exc
        if len(values) != 1 or not CHALLENGE.fullmatch(values[0]):
            raise PayloadError("no bt_challenge of 20 to 32 hex digits")
        public, private = keys(endpoint.secrets[0])
        answer = f"{public}|{mac(private, values[0].encode())}".encode()
        return Verified([], "braintree-challenge", Reply(answer, "text/plain"))

    def event_data(self, payload: bytes, index: int | None) -> Any:
        return notification(decode(_field(parse_form(payload), "bt_payload")))

    def extract(self, event_type: str, data: Any) -> ObjectRef | None:
        found = subject(data)
        if found is None:
            return None
        name, state = found
        version = iso_ms(state.get("updated_at")) or iso_ms(data.get("timestamp"))
        return ObjectRef(name, state["id"], version, state) if version is not None else None

    def describe_version(self, version: int) -> str | None:
        return updated_text(version)

    def sign(
        self, endpoint: Endpoint, body: bytes, *, now: float, secret_index: int = 0, url: str = ""
    ) -> tuple[bytes, dict[str, str]]:
        """``body`` is a notification's XML; its timestamp is set to ``now``, as Braintree would send it."""
        stamp = datetime.fromtimestamp(int(now), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        xml = TIMESTAMP.sub(f'<timestamp type="datetime">{stamp}</timestamp>'.encode(), body, count=1)
        payload = base64.encodebytes(xml).decode()
        public, private = keys(endpoint.secrets[secret_index])
        signature = f"{public}|{mac(private, payload.encode())}"
        form = urlencode({"bt_signature": signature, "bt_payload": payload}).encode()
        return form, {"Content-Type": "application/x-www-form-urlencoded"}
