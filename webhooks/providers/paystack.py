"""Paystack: ``x-paystack-signature: <hex>``.

Signed bytes: the raw body; HMAC-SHA512 keyed with the integration's secret key (``sk_test_…`` /
``sk_live_…``, the API key itself: Paystack has no separate webhook secret) as UTF-8; hex.
Nothing else is signed: no timestamp (no replay window), no header. Paystack sends no event id
either: the event id is ``sha256:`` of the body (``content_id``), so the id is the signed bytes
themselves: a replay is a duplicate and nothing unsigned can re-label it (no replay key needed).
A retry resends the same body, hence the same id. Type: the body's ``event`` (``charge.success``).
Object: ``data.id``; ``charge.dispute.*`` → ``dispute``, other ``charge.*`` → ``transaction``,
else the event's first word (``transfer``, ``refund``, ``subscription``, ``invoice``…); version:
the object's ``updated_at`` / ``updatedAt`` in ms where it has one, else 0 (transactions have
none: Paystack gives no order, so a dated state is never replaced by an undated one).
Docs: https://paystack.com/docs/payments/webhooks/#verify-event-origin
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

HEADER = "x-paystack-signature"
KEY_PREFIXES = ("sk_test_", "sk_live_")


def object_type(event_type: str) -> str:
    """The kind of object an event's ``data`` is."""
    if event_type.startswith("charge.dispute."):
        return "dispute"
    first = event_type.split(".", 1)[0]
    return "transaction" if first == "charge" else first


class Paystack(Provider):
    kind = "paystack"
    retry_horizon = 4 * DAY  # live: every 3 minutes four times, then hourly for 72 hours
    shorthands = {"PAYSTACK_SECRET_KEY": "secrets"}
    signature_header_names = (HEADER,)

    def validate(self, endpoint: Endpoint) -> None:
        super().validate(endpoint)
        for secret in endpoint.secrets:
            if not secret.startswith(KEY_PREFIXES) or len(secret) <= len("sk_test_") or secret != secret.strip():
                hint = " (pk_… is the public key)" if secret.startswith("pk_") else ""
                raise ConfigError(
                    f"endpoint {endpoint.name!r}: a Paystack secret key is sk_test_… or sk_live_…{hint} (fail closed)"
                )

    def verify(self, request: Request, endpoint: Endpoint, *, now: float) -> Verified:
        index = verify_body(request, endpoint, HEADER, "sha512")
        body = parse_json(request.body)
        event_type = body.get("event") if isinstance(body, dict) else None
        if not isinstance(event_type, str) or not event_type:
            raise PayloadError("no event")
        data = body.get("data")
        object_id = data.get("id") if isinstance(data, dict) else None
        reference = data.get("reference") if isinstance(data, dict) else None
        return Verified(
            [
                VerifiedEvent(
                    content_id(request.body),
                    event_type,
                    secret_index=index,
                    object_id=str(object_id) if isinstance(object_id, str | int) else None,
                    reference=reference if isinstance(reference, str) else None,
                )
            ],
            "paystack-sha512",
        )

    def extract(self, event_type: str, data: Any) -> ObjectRef | None:
        obj = data.get("data") if isinstance(data, dict) else None
        if not isinstance(obj, dict) or isinstance(obj.get("id"), bool) or not isinstance(obj.get("id"), str | int):
            return None
        version = iso_ms(obj.get("updated_at")) or iso_ms(obj.get("updatedAt")) or 0
        return ObjectRef(object_type(event_type), str(obj["id"]), version, obj)

    def describe_version(self, version: int) -> str | None:
        return updated_text(version)

    def amount(self, payload: bytes, index: int | None) -> tuple[int, str] | None:
        data = self.event_data(payload, index)
        obj = data.get("data") if isinstance(data, dict) else None
        return minor_amount(obj.get("amount"), obj.get("currency")) if isinstance(obj, dict) else None

    def sign(
        self, endpoint: Endpoint, body: bytes, *, now: float, secret_index: int = 0, url: str = ""
    ) -> tuple[bytes, dict[str, str]]:
        return body, {HEADER: sign_body(endpoint, body, secret_index, "sha512"), "Content-Type": "application/json"}
