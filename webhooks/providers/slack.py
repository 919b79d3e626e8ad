"""Slack: ``X-Slack-Signature: v0=<hex>`` and ``X-Slack-Request-Timestamp``.

Signed string: ``f"v0:{timestamp}:{body}"``; HMAC-SHA256 keyed with the app's signing secret as
UTF-8; hex. Replay window: ``tolerance_seconds`` (300 s) both ways. The timestamp and the body
(which carries the id) are signed: no replay key.
Events API (JSON): event id = the body's ``event_id`` (the same on Slack's retries), type = the
inner ``event.type`` (else the body's ``type``). ``url_verification`` is answered with its
challenge and stores nothing.
Slash commands and interactivity are form-encoded and carry no id: their id is
``sha256:<hex of the body>`` (a retry of the same request dedupes); their type is
``slash_command`` or, for interactivity, the ``payload`` JSON's ``type`` (``block_actions``…).
``event_data`` gives the form as a dict (the ``payload`` field parsed as JSON).
Docs: https://api.slack.com/authentication/verifying-requests-from-slack
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl

from webhooks.errors import PayloadError
from webhooks.providers.base import (
    HOUR,
    Endpoint,
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


def _is_json(body: bytes) -> bool:
    return body.lstrip()[:1] == b"{"


def parse_form(body: bytes) -> dict[str, Any]:
    """A form body as a dict; an interactivity ``payload`` field is parsed as JSON."""
    try:
        fields: dict[str, Any] = dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=True))
    except (ValueError, UnicodeDecodeError) as exc:
        raise PayloadError("body is neither JSON nor a form") from exc
    if "payload" in fields:
        fields["payload"] = parse_json(fields["payload"].encode())
    return fields


class Slack(Provider):
    kind = "slack"
    retry_horizon = HOUR  # 3 retries within minutes
    shorthands = {"SLACK_SIGNING_SECRET": "secrets"}

    def verify(self, request: Request, endpoint: Endpoint, *, now: float) -> Verified:
        header = require(request, "X-Slack-Signature")
        timestamp = require(request, "X-Slack-Request-Timestamp")
        signature = prefixed_hex(header, "v0", "X-Slack-Signature")
        ts = check_timestamp(timestamp, now, endpoint.tolerance_seconds)  # before the HMAC: cheapest first
        signed = f"v0:{timestamp}:".encode() + request.body
        index = first_match(endpoint.secrets, lambda s: hmac_digest(s.encode(), signed), [signature])
        if not _is_json(request.body):
            return Verified([self._form_event(request.body, index, ts)], "slack-v0")
        body = parse_json(request.body)
        if not isinstance(body, dict) or not isinstance(body.get("type"), str):
            raise PayloadError("Events API body without a type")
        if body["type"] == "url_verification":
            challenge = json.dumps({"challenge": body.get("challenge")}).encode()
            return Verified([], "slack-v0", Reply(challenge))
        event = body.get("event")
        inner = event.get("type") if isinstance(event, dict) else None
        event_type = inner if isinstance(inner, str) and inner else body["type"]
        event_id = body.get("event_id")
        if not isinstance(event_id, str) or not event_id:
            event_id = content_id(request.body)
        return Verified([VerifiedEvent(event_id, event_type, secret_index=index, signed_at=ts)], "slack-v0")

    @staticmethod
    def _form_event(body: bytes, index: int, ts: int) -> VerifiedEvent:
        fields = parse_form(body)
        payload = fields.get("payload")
        if isinstance(payload, dict) and isinstance(payload.get("type"), str):
            event_type = payload["type"]
        elif "command" in fields:
            event_type = "slash_command"
        else:
            raise PayloadError("form body is neither a slash command nor an interactivity payload")
        return VerifiedEvent(content_id(body), event_type, secret_index=index, signed_at=ts)

    def event_data(self, payload: bytes, index: int | None) -> Any:
        return parse_json(payload) if _is_json(payload) else parse_form(payload)

    def sign(
        self, endpoint: Endpoint, body: bytes, *, now: float, secret_index: int = 0, url: str = ""
    ) -> tuple[bytes, dict[str, str]]:
        ts = str(int(now))
        mac = hmac_digest(endpoint.secrets[secret_index].encode(), f"v0:{ts}:".encode() + body)
        content_type = "application/json" if _is_json(body) else "application/x-www-form-urlencoded"
        return body, {
            "X-Slack-Signature": f"v0={mac.hex()}",
            "X-Slack-Request-Timestamp": ts,
            "Content-Type": content_type,
        }
