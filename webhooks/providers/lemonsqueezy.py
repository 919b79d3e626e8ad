"""Lemon Squeezy: ``X-Signature: <hex>``.

Signed bytes: the raw body; HMAC-SHA256 keyed with the webhook's signing secret (chosen when the
webhook is created, 6 to 40 characters) as UTF-8; hex. Nothing else is signed: no timestamp (no
replay window), and not ``X-Event-Name``, which is never read (the type is the body's
``meta.event_name``). Lemon Squeezy sends no event id: the event id is ``sha256:`` of the body
(``content_id``), so a replay is a duplicate and nothing unsigned can re-label it (no replay key
needed); a retry or a resend from the dashboard carries the same body, hence the same id.
Object: the JSON:API resource ``data`` (``type`` in the singular: ``orders`` → ``order``, its
``id``), versioned by ``data.attributes.updated_at`` in ms (0 when absent).
Docs: https://docs.lemonsqueezy.com/help/webhooks/signing-requests
"""

from __future__ import annotations

from typing import Any

from webhooks.errors import ConfigError, PayloadError
from webhooks.providers.base import (
    DAY,
    Endpoint,
    ObjectRef,
    Provider,
    Request,
    Verified,
    VerifiedEvent,
    content_id,
    parse_json,
)
from webhooks.providers.body_hmac import sign_body, verify_body
from webhooks.providers.fields import iso_ms, minor_amount, updated_text

HEADER = "X-Signature"
MIN_SECRET = 6  # Lemon Squeezy's own lower bound


def _resource(data: Any) -> dict[str, Any] | None:
    obj = data.get("data") if isinstance(data, dict) else None
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str) or not isinstance(obj.get("id"), str):
        return None
    return obj if obj["type"] and obj["id"] else None


class LemonSqueezy(Provider):
    kind = "lemonsqueezy"
    retry_horizon = DAY  # three retries within minutes (5 s, 25 s, 125 s)
    shorthands = {"LEMONSQUEEZY_WEBHOOK_SECRET": "secrets"}
    signature_header_names = (HEADER,)

    def validate(self, endpoint: Endpoint) -> None:
        super().validate(endpoint)
        for secret in endpoint.secrets:
            if len(secret) < MIN_SECRET or secret != secret.strip():
                raise ConfigError(
                    f"endpoint {endpoint.name!r}: a signing secret is at least {MIN_SECRET} characters,"
                    " without surrounding spaces (fail closed)"
                )

    def verify(self, request: Request, endpoint: Endpoint, *, now: float) -> Verified:
        index = verify_body(request, endpoint, HEADER, "sha256")
        body = parse_json(request.body)
        meta = body.get("meta") if isinstance(body, dict) else None
        event_type = meta.get("event_name") if isinstance(meta, dict) else None
        if not isinstance(event_type, str) or not event_type:
            raise PayloadError("no meta.event_name")
        obj = _resource(body)
        return Verified(
            [
                VerifiedEvent(
                    content_id(request.body), event_type, secret_index=index, object_id=obj["id"] if obj else None
                )
            ],
            "lemonsqueezy-sha256",
        )

    def extract(self, event_type: str, data: Any) -> ObjectRef | None:
        obj = _resource(data)
        if obj is None:
            return None
        attributes = obj.get("attributes")
        version = iso_ms(attributes.get("updated_at")) if isinstance(attributes, dict) else None
        return ObjectRef(obj["type"].removesuffix("s"), obj["id"], version or 0, obj)

    def describe_version(self, version: int) -> str | None:
        return updated_text(version)

    def amount(self, payload: bytes, index: int | None) -> tuple[int, str] | None:
        obj = _resource(self.event_data(payload, index))
        attributes = obj.get("attributes") if obj else None
        if not isinstance(attributes, dict):
            return None
        return minor_amount(attributes.get("total"), attributes.get("currency"))

    def sign(
        self, endpoint: Endpoint, body: bytes, *, now: float, secret_index: int = 0, url: str = ""
    ) -> tuple[bytes, dict[str, str]]:
        try:
            meta = parse_json(body).get("meta")
        except (PayloadError, AttributeError):
            meta = None
        name = meta.get("event_name") if isinstance(meta, dict) else None
        return body, {
            HEADER: sign_body(endpoint, body, secret_index, "sha256"),
            "X-Event-Name": name if isinstance(name, str) else "order_created",
            "Content-Type": "application/json",
        }
