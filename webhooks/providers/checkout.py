"""Checkout.com: ``Cko-Signature: <hex>``.

Signed bytes: the raw body; HMAC-SHA256 keyed with the signature key of the workflow's webhook
action (legacy webhooks: the key Checkout.com shows for the webhook) as UTF-8; hex (Base16).
Nothing else is signed: no timestamp (no replay window), no header (a configured ``Authorization``
value is a shared secret of its own, not checked here: use ``basic_auth`` if it is one). The event
id (body ``id``, ``evt_…``) and type (body ``type``) are inside the body, so a replayed or
re-labelled delivery is a duplicate: no replay key is needed.
Object: ``data.id`` (``pay_…`` a ``payment``, ``dsp_…`` a ``dispute``, else the type's first
word), versioned by the event's ``created_on`` (older events: ``timestamp``) in ms: Checkout.com
does not promise order, and the body's ``version`` (``1.0.29``) is the event schema's, not the object's.
Docs: https://www.checkout.com/docs/developer-resources/webhooks/manage-webhooks/set-up-your-webhook-receiver
"""

from __future__ import annotations

from typing import Any

from webhooks.errors import ConfigError, PayloadError
from webhooks.providers.base import DAY, Endpoint, ObjectRef, Provider, Request, Verified, VerifiedEvent, parse_json
from webhooks.providers.body_hmac import sign_body, verify_body
from webhooks.providers.fields import iso_ms, minor_amount, time_text

HEADER = "Cko-Signature"
PREFIXES = {"pay": "payment", "dsp": "dispute"}


def _event(body: Any) -> tuple[str, str]:
    """The body's event id and type (signed, so trusted once the signature holds)."""
    if not isinstance(body, dict):
        raise PayloadError("body is not a Checkout.com event")
    event_id, event_type = body.get("id"), body.get("type")
    if not isinstance(event_id, str) or not event_id or not isinstance(event_type, str) or not event_type:
        raise PayloadError("no event id or type")
    return event_id, event_type


class Checkout(Provider):
    kind = "checkout"
    retry_horizon = 2 * DAY  # eight retries over about 30 hours (then by hand, same event id)
    shorthands = {"CHECKOUT_WEBHOOK_SECRET": "secrets"}
    signature_header_names = (HEADER,)

    def validate(self, endpoint: Endpoint) -> None:
        super().validate(endpoint)
        for secret in endpoint.secrets:
            if secret != secret.strip():
                raise ConfigError(f"endpoint {endpoint.name!r}: a signature key with surrounding spaces (fail closed)")
            if secret.startswith("pk_"):
                raise ConfigError(f"endpoint {endpoint.name!r}: a public key (pk_…) signs nothing (fail closed)")

    def verify(self, request: Request, endpoint: Endpoint, *, now: float) -> Verified:
        index = verify_body(request, endpoint, HEADER, "sha256")
        body = parse_json(request.body)
        event_id, event_type = _event(body)
        data = body.get("data")
        object_id = data.get("id") if isinstance(data, dict) else None
        reference = data.get("reference") if isinstance(data, dict) else None
        return Verified(
            [
                VerifiedEvent(
                    event_id,
                    event_type,
                    secret_index=index,
                    object_id=object_id if isinstance(object_id, str) else None,
                    reference=reference if isinstance(reference, str) else None,
                )
            ],
            "checkout-sha256",
        )

    def extract(self, event_type: str, data: Any) -> ObjectRef | None:
        obj = data.get("data") if isinstance(data, dict) else None
        if not isinstance(obj, dict) or not isinstance(obj.get("id"), str) or not obj["id"]:
            return None
        prefix = obj["id"].split("_", 1)[0]
        kind = PREFIXES.get(prefix) or event_type.split("_", 1)[0]
        version = iso_ms(data.get("created_on")) or iso_ms(data.get("timestamp")) or 0
        return ObjectRef(kind, obj["id"], version, obj)

    def describe_version(self, version: int) -> str | None:
        at = time_text(version) if version > 0 else None
        return f"event created {at}" if at else None

    def amount(self, payload: bytes, index: int | None) -> tuple[int, str] | None:
        data = self.event_data(payload, index)
        obj = data.get("data") if isinstance(data, dict) else None
        return minor_amount(obj.get("amount"), obj.get("currency")) if isinstance(obj, dict) else None

    def sign(
        self, endpoint: Endpoint, body: bytes, *, now: float, secret_index: int = 0, url: str = ""
    ) -> tuple[bytes, dict[str, str]]:
        return body, {HEADER: sign_body(endpoint, body, secret_index, "sha256"), "Content-Type": "application/json"}
