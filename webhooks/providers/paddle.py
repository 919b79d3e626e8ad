"""Paddle Billing: ``Paddle-Signature: ts=<unix>;h1=<hex>[;h1=<hex>…]``.

Signed string: ``f"{ts}:{body}"``; HMAC-SHA256 keyed with the notification destination's whole
secret key (``pdl_ntfset_…``) as UTF-8; hex. Several ``h1`` appear while a secret is rotated; as
paddle-python-sdk does, any one that matches passes, and (as for Stripe) entries without ``=`` or
``h1`` values that are not 32 bytes of hex are skipped; with no usable ``h1`` the request fails.
More than ``MAX_SIGNATURES`` (16) entries is ``too_many_signatures``. The timestamp window
(``tolerance_seconds``, both ways; Paddle's SDK defaults to 5 s) is checked before the HMAC.
The timestamp and the body (with ``event_id``) are signed: no replay key.
Event id: the body's ``event_id`` (the same on every retry and replay of the event; the
``notification_id`` is kept as the event's reference). Type: ``event_type``.
Object: the type's prefix (``transaction.completed`` → ``transaction``), ``data.id``; version:
``data.updated_at`` in ms, else the event's ``occurred_at`` (0 when neither parses, so an undated
state never replaces a dated one).
A secret must start with ``pdl_`` (a notification setting id, ``ntfset_…``, is refused at start-up).
Docs: https://developer.paddle.com/webhooks/signature-verification
"""

from __future__ import annotations

from typing import Any

from webhooks.errors import ConfigError, PayloadError, VerificationError
from webhooks.providers.base import (
    DAY,
    Endpoint,
    ObjectRef,
    Provider,
    Request,
    Verified,
    VerifiedEvent,
    check_timestamp,
    first_match,
    hmac_digest,
    parse_json,
    require,
    timestamped_hex,
)
from webhooks.providers.fields import iso_ms, updated_text
from webhooks.vocabulary import Reason

SIGNATURE = "Paddle-Signature"
SECRET_PREFIX = "pdl_"


def signed_string(timestamp: str, body: bytes) -> bytes:
    return timestamp.encode() + b":" + body


class Paddle(Provider):
    kind = "paddle"
    retry_horizon = 3 * DAY  # live notifications: retried over 3 days
    shorthands = {"PADDLE_WEBHOOK_SECRET": "secrets"}

    def validate(self, endpoint: Endpoint) -> None:
        super().validate(endpoint)
        if not all(s.startswith(SECRET_PREFIX) and len(s) > len(SECRET_PREFIX) for s in endpoint.secrets):
            raise ConfigError(
                f"endpoint {endpoint.name!r}: a secret is not a Paddle secret key (pdl_ntfset_…; fail closed)"
            )

    def verify(self, request: Request, endpoint: Endpoint, *, now: float) -> Verified:
        timestamp, signatures, unusable = timestamped_hex(require(request, SIGNATURE), ";", SIGNATURE, "ts", "h1")
        if timestamp is None:
            raise VerificationError(Reason.MALFORMED_SIGNATURE, f"{SIGNATURE} has no ts=")
        if not signatures:
            reason = Reason.MALFORMED_SIGNATURE if unusable else Reason.MISSING_SIGNATURE
            raise VerificationError(reason, f"{SIGNATURE} has no usable h1 signature")
        ts = check_timestamp(timestamp, now, endpoint.tolerance_seconds)  # before the HMAC: cheapest first
        signed = signed_string(timestamp, request.body)
        index = first_match(endpoint.secrets, lambda s: hmac_digest(s.encode(), signed), signatures)
        event = parse_json(request.body)
        if not isinstance(event, dict) or not isinstance(event.get("event_id"), str) or not event["event_id"]:
            raise PayloadError("no event_id")
        if not isinstance(event.get("event_type"), str) or not event["event_type"]:
            raise PayloadError("no event_type")
        data, notification = event.get("data"), event.get("notification_id")
        object_id = data.get("id") if isinstance(data, dict) else None
        return Verified(
            [
                VerifiedEvent(
                    event["event_id"],
                    event["event_type"],
                    secret_index=index,
                    signed_at=ts,
                    object_id=object_id if isinstance(object_id, str) else None,
                    reference=notification if isinstance(notification, str) else None,
                )
            ],
            "paddle-h1",
        )

    def extract(self, event_type: str, data: Any) -> ObjectRef | None:
        obj = data.get("data") if isinstance(data, dict) else None
        if not isinstance(obj, dict) or not obj.get("id"):
            return None
        version = iso_ms(obj.get("updated_at")) or iso_ms(data.get("occurred_at")) or 0
        return ObjectRef(event_type.split(".", 1)[0], str(obj["id"]), version, obj)

    def describe_version(self, version: int) -> str | None:
        return updated_text(version)

    def sign(
        self, endpoint: Endpoint, body: bytes, *, now: float, secret_index: int = 0, url: str = ""
    ) -> tuple[bytes, dict[str, str]]:
        ts = str(int(now))
        mac = hmac_digest(endpoint.secrets[secret_index].encode(), signed_string(ts, body))
        return body, {SIGNATURE: f"ts={ts};h1={mac.hex()}", "Content-Type": "application/json"}
