"""Razorpay: ``X-Razorpay-Signature: <hex>``.

Signed bytes: the raw body; HMAC-SHA256 keyed with the webhook secret (the one typed in the
Dashboard's webhook setup, not the API key secret) as UTF-8; hex. No timestamp is signed (no replay
window), nor the event id: ``X-Razorpay-Event-Id`` is a header beside the signature. The replay key
is a hash of the verified signature, so one signature yields one event whatever id it is re-sent
with. Event id: ``X-Razorpay-Event-Id`` (the same on every retry); missing after a valid signature
is ``malformed_payload`` (genuine, but it cannot be identified). Type: the body's ``event``
(``payment.captured``).
Object: the first entity the body says it ``contains`` (``payment``, ``order``, ``refund``…), its
``payload.<name>.entity.id``; version: the event's ``created_at`` (unix seconds) in ms. Razorpay's
entities carry no update time, so two events of one object in the same second keep the state
applied first. Amounts: the entity's ``amount`` (paise, cents) and ``currency``.
Docs: https://razorpay.com/docs/webhooks/validate-test/
"""

from __future__ import annotations

import hashlib
from typing import Any

from webhooks.errors import PayloadError, VerificationError
from webhooks.providers.base import (
    DAY,
    Endpoint,
    ObjectRef,
    Provider,
    Request,
    Verified,
    VerifiedEvent,
    first_match,
    hmac_digest,
    parse_json,
    replay_key,
    require,
)
from webhooks.providers.fields import minor_amount, time_text
from webhooks.vocabulary import Reason

SIGNATURE = "X-Razorpay-Signature"
EVENT_ID = "X-Razorpay-Event-Id"
SCHEME = "razorpay-sha256"
ID_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _entity(data: Any) -> tuple[str, dict[str, Any]] | None:
    """(name, entity) of the first entity the event ``contains``, or None."""
    if not isinstance(data, dict) or not isinstance(data.get("contains"), list) or not data["contains"]:
        return None
    name, payload = data["contains"][0], data.get("payload")
    wrapper = payload.get(name) if isinstance(name, str) and isinstance(payload, dict) else None
    entity = wrapper.get("entity") if isinstance(wrapper, dict) else None
    return (name, entity) if isinstance(entity, dict) else None


def _event_id(seed: bytes) -> str:
    """An id shaped like Razorpay's (14 base-62 characters), derived from ``seed``."""
    number = int.from_bytes(hashlib.sha256(seed).digest()[:11], "big")
    return "".join(ID_ALPHABET[(number >> (6 * i)) % 62] for i in range(14))


class Razorpay(Provider):
    kind = "razorpay"
    retry_horizon = 2 * DAY  # retried with exponential backoff for 24 hours
    shorthands = {"RAZORPAY_WEBHOOK_SECRET": "secrets"}
    signature_header_names = (SIGNATURE,)

    def verify(self, request: Request, endpoint: Endpoint, *, now: float) -> Verified:
        try:
            signature = bytes.fromhex(require(request, SIGNATURE))
        except ValueError as exc:
            raise VerificationError(Reason.MALFORMED_SIGNATURE, f"{SIGNATURE} is not hex") from exc
        index = first_match(endpoint.secrets, lambda s: hmac_digest(s.encode(), request.body), [signature])
        event_id = request.header(EVENT_ID)
        if not event_id or not event_id.strip():
            raise PayloadError(f"no {EVENT_ID} header")
        body = parse_json(request.body)
        event_type = body.get("event") if isinstance(body, dict) else None
        if not isinstance(event_type, str) or not event_type:
            raise PayloadError("no event type")
        found = _entity(body)
        object_id = found[1].get("id") if found else None
        event = VerifiedEvent(
            event_id.strip(),
            event_type,
            secret_index=index,
            object_id=object_id if isinstance(object_id, str) else None,
        )
        return Verified([event], SCHEME, replay_key=replay_key(SCHEME, signature))

    def extract(self, event_type: str, data: Any) -> ObjectRef | None:
        found = _entity(data)
        created = data.get("created_at") if isinstance(data, dict) else None
        if found is None or not found[1].get("id") or type(created) is not int:
            return None
        name, entity = found
        return ObjectRef(name, str(entity["id"]), created * 1000, entity)

    def describe_version(self, version: int) -> str | None:
        at = time_text(version) if version > 0 else None
        return f"event created {at}" if at else None

    def amount(self, payload: bytes, index: int | None) -> tuple[int, str] | None:
        found = _entity(parse_json(payload))
        return minor_amount(found[1].get("amount"), found[1].get("currency")) if found else None

    def sign(
        self, endpoint: Endpoint, body: bytes, *, now: float, secret_index: int = 0, url: str = ""
    ) -> tuple[bytes, dict[str, str]]:
        mac = hmac_digest(endpoint.secrets[secret_index].encode(), body)
        return body, {
            SIGNATURE: mac.hex(),
            EVENT_ID: _event_id(str(int(now)).encode() + body),
            "Content-Type": "application/json",
        }
