"""Shopify: ``X-Shopify-Hmac-Sha256`` (Shopify "Events" deliveries: ``Shopify-Hmac-Sha256``).

Signed bytes: the raw body; HMAC-SHA256 keyed with the app's client secret as UTF-8; base64.
No timestamp is signed, nor the webhook id or topic: the replay key is a hash of the verified
signature, so one signature yields one event. After a secret rotation Shopify keeps signing with the old secret for up
to an hour: configure both.
Event id: ``X-Shopify-Webhook-Id`` (or ``Shopify-Webhook-Id``); type: ``X-Shopify-Topic`` (or
``Shopify-Topic``), e.g. ``orders/paid``. Those headers are not signed: missing after a valid
signature is ``malformed_payload``.
Object: the topic's resource in the singular (``orders/paid`` → ``order``), the body's ``id``,
versioned by ``updated_at`` in ms (0 when absent, so an undated state never replaces a dated one).
Docs: https://shopify.dev/docs/apps/build/webhooks/subscribe/https#step-2-validate-the-origin-of-your-webhook
"""

from __future__ import annotations

import base64
import hashlib
from datetime import datetime
from typing import Any

from webhooks.errors import PayloadError
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
    replay_key,
    require,
)
from webhooks.providers.fields import iso_ms


def _header(request: Request, name: str) -> str | None:
    return request.header(f"X-Shopify-{name}") or request.header(f"Shopify-{name}")


def singular(resource: str) -> str:
    if resource.endswith("ies"):
        return resource[:-3] + "y"
    if resource.endswith("ses"):  # addresses, businesses
        return resource[:-2]
    return resource[:-1] if resource.endswith("s") and not resource.endswith("ss") else resource


class Shopify(Provider):
    kind = "shopify"
    retry_horizon = DAY  # 8 retries over 4 hours
    shorthands = {"SHOPIFY_WEBHOOK_SECRET": "secrets"}
    option_names = frozenset({"topic"})
    signature_header_names = ("X-Shopify-Hmac-Sha256", "Shopify-Hmac-Sha256")

    def verify(self, request: Request, endpoint: Endpoint, *, now: float) -> Verified:
        name = "X-Shopify-Hmac-Sha256" if request.header("X-Shopify-Hmac-Sha256") else "Shopify-Hmac-Sha256"
        signature = b64decode(require(request, name))
        index = first_match(endpoint.secrets, lambda s: hmac_digest(s.encode(), request.body), [signature])
        webhook_id, topic = _header(request, "Webhook-Id"), _header(request, "Topic")
        if not webhook_id or not topic:
            raise PayloadError("no Shopify webhook id or topic header")
        return Verified(
            [VerifiedEvent(webhook_id.strip(), topic.strip(), secret_index=index)],
            "shopify-hmac",
            replay_key=replay_key("shopify-hmac", signature),
        )

    def extract(self, event_type: str, data: Any) -> ObjectRef | None:
        if not isinstance(data, dict) or data.get("id") is None:
            return None
        resource = singular(event_type.split("/", 1)[0])
        return ObjectRef(resource, str(data["id"]), iso_ms(data.get("updated_at")) or 0, data)

    def sign(
        self, endpoint: Endpoint, body: bytes, *, now: float, secret_index: int = 0, url: str = ""
    ) -> tuple[bytes, dict[str, str]]:
        mac = hmac_digest(endpoint.secrets[secret_index].encode(), body)
        digest = hashlib.sha256(str(int(now)).encode() + body).hexdigest()
        webhook_id = f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
        return body, {
            "X-Shopify-Hmac-Sha256": base64.b64encode(mac).decode(),
            "X-Shopify-Webhook-Id": webhook_id,
            "X-Shopify-Topic": str(endpoint.options.get("topic", "orders/updated")),
            "X-Shopify-Triggered-At": datetime.fromtimestamp(now).astimezone().isoformat(),
            "Content-Type": "application/json",
        }
