"""Zoom: ``x-zm-signature: v0=<hex>`` and ``x-zm-request-timestamp``.

Signed string: ``f"v0:{timestamp}:{body}"``; HMAC-SHA256 keyed with the app's Secret Token as
UTF-8; hex. Replay window: ``tolerance_seconds`` (300 s) both ways, checked before the HMAC.
The timestamp and the body are signed: no replay key. Zoom's bodies carry no event id, so the id
is ``sha256:<hex of the body>`` (the body holds ``event_ts``, the event's time in ms, so a retry of
the same event dedupes and two events differ). Type: the body's ``event`` (``meeting.started``).
``endpoint.url_validation`` is answered ``{"plainToken", "encryptedToken"}`` (hex HMAC-SHA256 of the
plain token, keyed with the secret that verified the request) and stores nothing; Zoom signs it
like any event, so it is never answered without a valid signature.
Object: the type's first word (``meeting``) and ``payload.object.id``; state ``payload.object``;
version: ``event_ts`` (ms; Zoom objects carry no version of their own).
Docs: https://developers.zoom.us/docs/api/webhooks/#verify-webhook-events
"""

from __future__ import annotations

import json
from typing import Any

from webhooks.errors import ConfigError, PayloadError
from webhooks.providers.base import (
    HOUR,
    Endpoint,
    ObjectRef,
    Provider,
    Reply,
    Request,
    Verified,
    VerifiedEvent,
    check_timestamp,
    content_id,
    first_match,
    hmac_digest,
    parse_json,
    prefixed_hex,
    require,
)
from webhooks.providers.fields import time_text

VALIDATION = "endpoint.url_validation"


def encrypted_token(secret: str, plain_token: str) -> str:
    """The answer to a URL validation: hex HMAC-SHA256 of the plain token."""
    return hmac_digest(secret.encode(), plain_token.encode()).hex()


def _object(data: Any) -> Any:
    payload = data.get("payload") if isinstance(data, dict) else None
    return payload.get("object") if isinstance(payload, dict) else None


class Zoom(Provider):
    kind = "zoom"
    retry_horizon = 3 * HOUR  # three retries: 5, 30 and 90 minutes after the first attempt
    shorthands = {"ZOOM_WEBHOOK_SECRET_TOKEN": "secrets"}
    signature_header_names = ("x-zm-signature",)

    def validate(self, endpoint: Endpoint) -> None:
        super().validate(endpoint)
        if any(s != s.strip() for s in endpoint.secrets):
            raise ConfigError(f"endpoint {endpoint.name!r}: a secret token with surrounding spaces (fail closed)")

    def verify(self, request: Request, endpoint: Endpoint, *, now: float) -> Verified:
        signature = prefixed_hex(require(request, "x-zm-signature"), "v0", "x-zm-signature")
        timestamp = require(request, "x-zm-request-timestamp")
        ts = check_timestamp(timestamp, now, endpoint.tolerance_seconds)  # before the HMAC: cheapest first
        signed = f"v0:{timestamp}:".encode() + request.body
        index = first_match(endpoint.secrets, lambda s: hmac_digest(s.encode(), signed), [signature])
        body = parse_json(request.body)
        event = body.get("event") if isinstance(body, dict) else None
        if not isinstance(event, str) or not event:
            raise PayloadError("Zoom body without an event")
        if event == VALIDATION:
            payload = body.get("payload")
            plain = payload.get("plainToken") if isinstance(payload, dict) else None
            if not isinstance(plain, str) or not plain:
                raise PayloadError("url_validation without a plainToken")
            answer = {"plainToken": plain, "encryptedToken": encrypted_token(endpoint.secrets[index], plain)}
            return Verified([], "zoom-v0", Reply(json.dumps(answer).encode()))
        found = _object(body)
        object_id = found.get("id") if isinstance(found, dict) else None
        return Verified(
            [
                VerifiedEvent(
                    content_id(request.body),
                    event,
                    secret_index=index,
                    signed_at=ts,
                    object_id=None if object_id in (None, "") else str(object_id),
                )
            ],
            "zoom-v0",
        )

    def extract(self, event_type: str, data: Any) -> ObjectRef | None:
        found = _object(data)
        version = data.get("event_ts") if isinstance(data, dict) else None
        if not isinstance(found, dict) or found.get("id") in (None, "") or type(version) is not int:
            return None
        return ObjectRef(event_type.split(".", 1)[0], str(found["id"]), version, found)

    def describe_version(self, version: int) -> str | None:
        at = time_text(version) if version > 0 else None
        return f"event at {at}" if at else None

    def sign(
        self, endpoint: Endpoint, body: bytes, *, now: float, secret_index: int = 0, url: str = ""
    ) -> tuple[bytes, dict[str, str]]:
        ts = str(int(now))
        mac = hmac_digest(endpoint.secrets[secret_index].encode(), f"v0:{ts}:".encode() + body)
        return body, {
            "x-zm-signature": f"v0={mac.hex()}",
            "x-zm-request-timestamp": ts,
            "Content-Type": "application/json",
        }
