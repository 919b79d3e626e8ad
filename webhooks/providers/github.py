"""GitHub: ``X-Hub-Signature-256: sha256=<hex>``.

Signed bytes: the raw body; HMAC-SHA256 keyed with the webhook secret as UTF-8; hex. The legacy
SHA-1 ``X-Hub-Signature`` is not accepted. No timestamp is signed (no replay window), nor the
delivery id: the replay key is a hash of the verified signature, so one signature yields one event.
Event id: ``X-GitHub-Delivery`` (the same on a redelivery); type: ``X-GitHub-Event`` plus the
body's ``action`` when present (``issues.opened``; ``ping`` stays ``ping``). Those two headers are
not signed: when either is missing after a valid signature the delivery is ``malformed_payload``
(genuine, but it cannot be identified), not a signature failure.
Bodies are JSON, or ``application/x-www-form-urlencoded`` with the JSON in a ``payload`` field.
Docs: https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any
from urllib.parse import parse_qs

from webhooks.errors import PayloadError
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
    looks_like_json,
    parse_json,
    prefixed_hex,
    replay_key,
    require,
)
from webhooks.providers.fields import iso_ms, updated_text

EVENT_KEYS = (
    ("zen", "ping"),
    ("comment", "issue_comment"),
    ("pull_request", "pull_request"),
    ("issue", "issues"),
    ("release", "release"),
    ("workflow_run", "workflow_run"),
    ("pusher", "push"),
)


def parse_body(body: bytes) -> Any:
    """The event JSON, whether sent as JSON or as a form with a ``payload`` field."""
    if looks_like_json(body):
        return parse_json(body)
    try:
        fields = parse_qs(body.decode("utf-8"), strict_parsing=True)
    except (ValueError, UnicodeDecodeError) as exc:
        raise PayloadError("body is neither JSON nor a form") from exc
    if len(fields.get("payload", [])) != 1:
        raise PayloadError("form body without one payload field")
    return parse_json(fields["payload"][0].encode())


class GitHub(Provider):
    kind = "github"
    retry_horizon = 0 * DAY  # no automatic retries (manual redelivery reuses the id: your call)
    shorthands = {"GITHUB_WEBHOOK_SECRET": "secrets"}
    signature_header_names = ("X-Hub-Signature-256", "X-Hub-Signature")

    def verify(self, request: Request, endpoint: Endpoint, *, now: float) -> Verified:
        header = require(request, "X-Hub-Signature-256")
        signature = prefixed_hex(header, "sha256", "X-Hub-Signature-256")
        index = first_match(endpoint.secrets, lambda s: hmac_digest(s.encode(), request.body), [signature])
        delivery = request.header("X-GitHub-Delivery")
        event = request.header("X-GitHub-Event")
        if not delivery or not event:
            raise PayloadError("no X-GitHub-Delivery or X-GitHub-Event header")
        body = parse_body(request.body)
        action = body.get("action") if isinstance(body, dict) else None
        event_type = f"{event}.{action}" if isinstance(action, str) and action else event
        return Verified(
            [VerifiedEvent(delivery, event_type, secret_index=index)],
            "github-sha256",
            replay_key=replay_key("github-sha256", signature),
        )

    def event_data(self, payload: bytes, index: int | None) -> Any:
        return parse_body(payload)

    def extract(self, event_type: str, data: Any) -> ObjectRef | None:
        # ``issues.opened`` carries ``issue``, ``pull_request.closed`` carries ``pull_request``.
        name = event_type.split(".", 1)[0]
        obj = data.get(name.removesuffix("s")) if isinstance(data, dict) else None
        if not isinstance(obj, dict) or obj.get("id") is None:
            return None
        version = iso_ms(obj.get("updated_at")) or iso_ms(obj.get("created_at"))
        return None if version is None else ObjectRef(name.removesuffix("s"), str(obj["id"]), version, obj)

    def describe_version(self, version: int) -> str | None:
        return updated_text(version)

    def sign(
        self, endpoint: Endpoint, body: bytes, *, now: float, secret_index: int = 0, url: str = ""
    ) -> tuple[bytes, dict[str, str]]:
        try:
            data = parse_body(body)
        except PayloadError:
            data = None
        # GitHub names the event only in a header: guess it from the body's telltale key.
        event = next((e for key, e in EVENT_KEYS if isinstance(data, dict) and key in data), "push")
        mac = hmac_digest(endpoint.secrets[secret_index].encode(), body)
        delivery = uuid.UUID(bytes=hashlib.sha256(str(int(now)).encode() + body).digest()[:16])
        return body, {
            "X-Hub-Signature-256": f"sha256={mac.hex()}",
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": str(delivery),
            "Content-Type": "application/json",
        }
