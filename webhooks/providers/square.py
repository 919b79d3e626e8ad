"""Square: ``x-square-hmacsha256-signature: <base64>``.

Signed bytes: the notification URL (exactly as subscribed in Square's dashboard) followed by the
raw body; HMAC-SHA256 keyed with the subscription's signature key as UTF-8; base64. The legacy
HMAC-SHA1 ``x-square-signature`` is not accepted.
URL: ``options["notification_url"]`` (required, absolute http(s)), never the request's ``Host``
or query: a proxy in front changes neither. If only ``request.url`` verifies, the configured
``notification_url`` is wrong: ``url_mismatch``.
No timestamp is signed; the body is, and carries the id: a replay is a duplicate, no replay key.
Event id: the body's ``event_id`` (the same on Square's retries); type: the body's ``type``
(``payment.updated``). Missing after a valid signature: ``malformed_payload``.
Object: ``data.type`` (``payment``), ``data.id``, state ``data.object[data.type]``, versioned by
that state's ``updated_at`` in ms (0 when absent, so an undated state never replaces a dated one).
Square's own ``version`` exists only on some objects (orders, invoices), so it is not used.
Docs: https://developer.squareup.com/docs/webhooks/step3validate
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any
from urllib.parse import urlsplit

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
    first_match,
    hmac_digest,
    parse_json,
    require,
)
from webhooks.providers.fields import iso_ms, minor_amount, updated_text
from webhooks.vocabulary import Reason

HEADER = "x-square-hmacsha256-signature"


def expected(secret: str, url: str, body: bytes) -> bytes:
    return hmac_digest(secret.encode(), url.encode() + body)


def _state(data: Any) -> tuple[str, str, Any] | None:
    """(object type, id, state) of an event's ``data``, or None when it names no object."""
    inner = data.get("data") if isinstance(data, dict) else None
    if not isinstance(inner, dict) or not isinstance(inner.get("type"), str) or inner.get("id") in (None, ""):
        return None
    found = inner.get("object")
    state = found.get(inner["type"], found) if isinstance(found, dict) else found
    return inner["type"], str(inner["id"]), state


class Square(Provider):
    kind = "square"
    signs_url = True  # the URL it calls is signed
    retry_horizon = DAY  # retried with backoff for up to 24 hours
    shorthands = {"SQUARE_WEBHOOK_SIGNATURE_KEY": "secrets", "SQUARE_NOTIFICATION_URL": "notification_url"}
    option_names = frozenset({"notification_url"})
    signature_header_names = ("x-square-hmacsha256-signature", "x-square-signature")

    def validate(self, endpoint: Endpoint) -> None:
        super().validate(endpoint)
        if any(s != s.strip() for s in endpoint.secrets):
            raise ConfigError(f"endpoint {endpoint.name!r}: a signature key with surrounding spaces (fail closed)")
        url = endpoint.options.get("notification_url")
        if not isinstance(url, str) or not url:
            raise ConfigError(
                f"endpoint {endpoint.name!r}: notification_url (the URL subscribed in Square) is required: "
                "Square signs it, and the request's Host header is the client's"
            )
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 -- raises on a port that is not a number
        except ValueError as exc:
            raise ConfigError(f"endpoint {endpoint.name!r}: notification_url does not parse") from exc
        if parts.scheme not in ("https", "http") or not parts.hostname or parts.fragment:
            raise ConfigError(f"endpoint {endpoint.name!r}: notification_url must be an absolute http(s) URL")

    def verify(self, request: Request, endpoint: Endpoint, *, now: float) -> Verified:
        signature = b64decode(require(request, HEADER))
        if len(signature) != hashlib.sha256().digest_size:  # before the body is touched
            raise VerificationError(Reason.MALFORMED_SIGNATURE, f"{HEADER} is not a SHA-256 digest")
        url = str(endpoint.options.get("notification_url") or "")
        if not url:  # validate() refuses this; never fall back to the client's Host
            raise VerificationError(Reason.URL_MISMATCH, f"endpoint {endpoint.name!r} has no notification_url")
        try:
            index = first_match(endpoint.secrets, lambda s: expected(s, url, request.body), [signature])
        except VerificationError:
            if request.url and request.url != url:
                try:
                    first_match(endpoint.secrets, lambda s: expected(s, request.url, request.body), [signature])
                except VerificationError:
                    pass
                else:
                    raise VerificationError(
                        Reason.URL_MISMATCH, "request.url verifies but options.notification_url does not"
                    ) from None
            raise
        body = parse_json(request.body)
        event_id = body.get("event_id") if isinstance(body, dict) else None
        event_type = body.get("type") if isinstance(body, dict) else None
        if not isinstance(event_id, str) or not event_id or not isinstance(event_type, str) or not event_type:
            raise PayloadError("Square body without an event_id or a type")
        found = _state(body)
        return Verified(
            [VerifiedEvent(event_id, event_type, secret_index=index, object_id=found[1] if found else None)],
            "square-hmacsha256",
        )

    def extract(self, event_type: str, data: Any) -> ObjectRef | None:
        found = _state(data)
        if found is None:
            return None
        kind, object_id, state = found
        version = iso_ms(state.get("updated_at")) if isinstance(state, dict) else None
        return ObjectRef(kind, object_id, version or 0, state)

    def describe_version(self, version: int) -> str | None:
        return updated_text(version)

    def amount(self, payload: bytes, index: int | None) -> tuple[int, str] | None:
        found = _state(self.event_data(payload, index))
        money = found[2].get("amount_money") if found and isinstance(found[2], dict) else None
        return minor_amount(money.get("amount"), money.get("currency")) if isinstance(money, dict) else None

    def sign(
        self, endpoint: Endpoint, body: bytes, *, now: float, secret_index: int = 0, url: str = ""
    ) -> tuple[bytes, dict[str, str]]:
        # Square signs the subscribed URL wherever the request is posted (a local test server).
        signed_url = str(endpoint.options.get("notification_url") or url)
        if not signed_url:
            raise ValueError("square signs the notification URL: configure options.notification_url")
        mac = expected(endpoint.secrets[secret_index], signed_url, body)
        return body, {
            "x-square-hmacsha256-signature": base64.b64encode(mac).decode(),
            "Square-Environment": "Production",
            "Content-Type": "application/json",
        }
