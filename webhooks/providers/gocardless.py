"""GoCardless: ``Webhook-Signature: <hex>``, a batch of events per request.

Signed bytes: the raw body; HMAC-SHA256 keyed with the webhook endpoint's secret as UTF-8; hex.
No timestamp is signed, but the body is, with every event's ``id``: a replay is a duplicate of the
same ids (no replay key needed). A request whose signature fails is answered ``498`` (GoCardless:
"webhooks with an invalid signature must return a 498 Token Invalid"), with its reason code.
The body is ``{"events": [...], "meta": {"webhook_id": ...}}``: one event per element, ``index`` =
its position, id = the event's ``id`` (``EV…``), type = ``<resource_type>.<action>``
(``payments.confirmed``). An empty ``events`` list is ``malformed_payload``.
Object: the resource in the singular (``payments`` → ``payment``), its id from ``links``
(``links.payment``); version: the event's ``created_at`` in ms. Events carry no snapshot of the
resource, only its id: the object's state is its newest event (handlers that need the resource
fetch it from GoCardless's API).
Docs: https://developer.gocardless.com/getting-started/staying-up-to-date-with-webhooks
"""

from __future__ import annotations

from typing import Any

from webhooks.errors import PayloadError, VerificationError
from webhooks.providers.base import (
    Endpoint,
    ObjectRef,
    Provider,
    Request,
    Verified,
    VerifiedEvent,
    first_match,
    hmac_digest,
    parse_json,
    require,
)
from webhooks.providers.fields import iso_ms, time_text
from webhooks.vocabulary import Reason

SIGNATURE = "Webhook-Signature"
INVALID_TOKEN = 498  # the status GoCardless asks for when a signature does not verify


def singular(resource_type: str) -> str:
    return resource_type.removesuffix("s")


def _signature_secret_index(request: Request, endpoint: Endpoint) -> int:
    try:
        signature = bytes.fromhex(require(request, SIGNATURE))
    except ValueError as exc:
        raise VerificationError(Reason.MALFORMED_SIGNATURE, f"{SIGNATURE} is not hex") from exc
    return first_match(endpoint.secrets, lambda s: hmac_digest(s.encode(), request.body), [signature])


class GoCardless(Provider):
    kind = "gocardless"
    # Up to 8 automatic retries at increasing intervals, and any webhook may be retried from the
    # dashboard or the API later (the same events): assume the longest, the default 30 days.
    shorthands = {"GOCARDLESS_WEBHOOK_SECRET": "secrets"}
    signature_header_names = (SIGNATURE,)

    def verify(self, request: Request, endpoint: Endpoint, *, now: float) -> Verified:
        try:
            index = _signature_secret_index(request, endpoint)
        except VerificationError as exc:
            raise VerificationError(exc.reason, exc.detail, status=INVALID_TOKEN) from exc
        body = parse_json(request.body)
        events = body.get("events") if isinstance(body, dict) else None
        if not isinstance(events, list) or not events:
            raise PayloadError("body has no non-empty events list")
        verified = []
        for position, event in enumerate(events):
            if not isinstance(event, dict):
                raise PayloadError(f"event {position} is not an object")
            event_id, resource, action = event.get("id"), event.get("resource_type"), event.get("action")
            if not all(isinstance(v, str) and v for v in (event_id, resource, action)):
                raise PayloadError(f"event {position} has no id, resource_type or action")
            links = event.get("links")
            object_id = links.get(singular(str(resource))) if isinstance(links, dict) else None
            verified.append(
                VerifiedEvent(
                    str(event_id),
                    f"{resource}.{action}",
                    position,
                    index,
                    object_id=object_id if isinstance(object_id, str) else None,
                )
            )
        return Verified(verified, "gocardless-sha256")

    def batch_item(self, data: Any, index: int) -> Any:
        try:
            return data["events"][index]
        except (KeyError, IndexError, TypeError):
            return None

    def extract(self, event_type: str, data: Any) -> ObjectRef | None:
        resource = data.get("resource_type") if isinstance(data, dict) else None
        links = data.get("links") if isinstance(data, dict) else None
        if not isinstance(resource, str) or not isinstance(links, dict):
            return None
        name = singular(resource)
        object_id, version = links.get(name), iso_ms(data.get("created_at"))
        if not isinstance(object_id, str) or not object_id or version is None:
            return None
        return ObjectRef(name, object_id, version, data)

    def describe_version(self, version: int) -> str | None:
        at = time_text(version) if version > 0 else None
        return f"event created {at}" if at else None

    def sign(
        self, endpoint: Endpoint, body: bytes, *, now: float, secret_index: int = 0, url: str = ""
    ) -> tuple[bytes, dict[str, str]]:
        mac = hmac_digest(endpoint.secrets[secret_index].encode(), body)
        return body, {
            SIGNATURE: mac.hex(),
            "Origin": "https://api.gocardless.com",
            "User-Agent": "gocardless-webhook-service/1.2",
            "Content-Type": "application/json",
        }
