"""Mailgun: the body's ``signature`` object, ``{"timestamp", "token", "signature"}``.

Signed string: ``timestamp + token`` (concatenated as sent); HMAC-SHA256 keyed with the domain's
HTTP webhook signing key as UTF-8; hex. Replay window: ``tolerance_seconds`` (300 s) both ways on
that timestamp, checked before the HMAC. The signature sits inside the JSON body, so the body is
parsed first (as Adyen's items are; the receiver has already bounded its size).
**The event data is not signed**: not ``event-data``, its ``id``, ``event`` or recipient, nor the
bytes around the signature object. The token is random per request, so it is the replay key: one
signature yields at most one event, whatever ``event-data`` it arrives with. A copy captured
before the genuine delivery could carry other event data once: nothing in ``event-data`` is to be
acted on without Mailgun's own copy: ``api_key`` and ``domain`` are required (start-up fails
closed without them), and ``refetch`` has handlers and forwarding see only the copy in the
domain's event log (``mailgun_api``).
Event id: ``event-data.id``; type: ``event-data.event`` (``delivered``, ``failed``, ``opened``…).
Object: ``message`` and ``event-data.message.headers.message-id``; state ``event-data``; version
``event-data.timestamp`` (float seconds) in ms. Legacy form-encoded webhooks are not accepted.
Docs: https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/securing-webhooks
"""

from __future__ import annotations

import hashlib
import json
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
    replay_key,
)
from webhooks.providers.fields import time_text
from webhooks.providers.mailgun_message import message_id
from webhooks.vocabulary import Reason

MAX_TOKEN = 255  # Mailgun's tokens are 50 characters; a longer one costs a bigger HMAC for nothing


def expected(secret: str, timestamp: str, token: str) -> bytes:
    return hmac_digest(secret.encode(), (timestamp + token).encode())


def _signature(body: Any) -> tuple[str, str, bytes]:
    """(timestamp, token, signature bytes) of a parsed body's ``signature`` object."""
    found = body.get("signature") if isinstance(body, dict) else None
    if not isinstance(found, dict) or not any(found.get(k) for k in ("timestamp", "token", "signature")):
        raise VerificationError(Reason.MISSING_SIGNATURE, "no signature object in the body")
    timestamp, token, signature = (found.get(k) for k in ("timestamp", "token", "signature"))
    if not (isinstance(timestamp, str) and isinstance(token, str) and isinstance(signature, str)):
        raise VerificationError(Reason.MALFORMED_SIGNATURE, "signature needs timestamp, token and signature strings")
    if not timestamp or not token or len(token) > MAX_TOKEN:
        raise VerificationError(Reason.MALFORMED_SIGNATURE, f"token must hold 1 to {MAX_TOKEN} characters")
    try:
        return timestamp, token, bytes.fromhex(signature)
    except ValueError as exc:
        raise VerificationError(Reason.MALFORMED_SIGNATURE, "signature is not hex") from exc


class Mailgun(Provider):
    kind = "mailgun"
    retry_horizon = DAY  # retried over 8 hours (10 min … 4 h apart)
    shorthands = {"MAILGUN_WEBHOOK_SIGNING_KEY": "secrets", "MAILGUN_API_KEY": "api_key", "MAILGUN_DOMAIN": "domain"}
    option_names = frozenset({"api_key", "domain", "region", "api_base"})

    def validate(self, endpoint: Endpoint) -> None:
        super().validate(endpoint)
        name, options = endpoint.name, endpoint.options
        if any(s != s.strip() for s in endpoint.secrets):
            raise ConfigError(f"endpoint {name!r}: a signing key with surrounding spaces (fail closed)")
        if not (options.get("api_key") and options.get("domain")):
            raise ConfigError(
                f"endpoint {name!r}: api_key and domain are required: Mailgun signs no event data, so only the copy"
                " in the domain's event log is acted on (fail closed)"
            )
        if options.get("region", "us") not in ("us", "eu"):
            raise ConfigError(f'endpoint {name!r}: region must be "us" or "eu"')
        if "api_base" in options:  # the api_key goes there: Mailgun's hosts only
            from webhooks.providers import api  # no I/O: only its host check

            api.check_base(name, options["api_base"], ("api.mailgun.net", "api.eu.mailgun.net"))

    def refetch(
        self, endpoint: Endpoint, event_type: str, data: Any, ref: ObjectRef | None
    ) -> tuple[Any, ObjectRef | None]:
        """Only Mailgun's own copy of the event data is acted on (``api_key`` and ``domain``: required)."""
        from webhooks.providers import mailgun_api  # the API client is worker-side I/O, loaded only here

        copy = {"event-data": mailgun_api.event(endpoint, data.get("event-data") if isinstance(data, dict) else None)}
        return copy, self.extract(event_type, copy)

    def calls_out(self, endpoint: Endpoint) -> bool:
        return True

    def verify(self, request: Request, endpoint: Endpoint, *, now: float) -> Verified:
        try:
            body = parse_json(request.body)
        except PayloadError as exc:  # no JSON, so no signature object: not genuine
            raise VerificationError(Reason.MISSING_SIGNATURE, "body is not JSON with a signature object") from exc
        timestamp, token, signature = _signature(body)
        ts = check_timestamp(timestamp, now, endpoint.tolerance_seconds)  # before the HMAC: cheapest first
        index = first_match(endpoint.secrets, lambda s: expected(s, timestamp, token), [signature])
        data = body.get("event-data")
        event_id = data.get("id") if isinstance(data, dict) else None
        event_type = data.get("event") if isinstance(data, dict) else None
        if not isinstance(event_id, str) or not event_id or not isinstance(event_type, str) or not event_type:
            raise PayloadError("Mailgun body without event-data.id or event-data.event")
        event = VerifiedEvent(event_id, event_type, secret_index=index, signed_at=ts, object_id=message_id(data))
        return Verified([event], "mailgun-sha256", replay_key=replay_key("mailgun", token))

    def extract(self, event_type: str, data: Any) -> ObjectRef | None:
        inner = data.get("event-data") if isinstance(data, dict) else None
        found = message_id(inner)
        at = inner.get("timestamp") if isinstance(inner, dict) else None
        if found is None or isinstance(at, bool) or not isinstance(at, int | float):
            return None
        return ObjectRef("message", found, int(at * 1000), inner)

    def describe_version(self, version: int) -> str | None:
        at = time_text(version) if version > 0 else None
        return f"event at {at}" if at else None

    def sign(
        self, endpoint: Endpoint, body: bytes, *, now: float, secret_index: int = 0, url: str = ""
    ) -> tuple[bytes, dict[str, str]]:
        try:
            data = json.loads(body)
        except RecursionError as exc:
            raise ValueError("body is nested too deeply") from exc
        if not isinstance(data, dict):
            raise ValueError("mailgun signs inside a JSON object: the body must be one")
        timestamp = str(int(now))
        token = hashlib.sha256(timestamp.encode() + body).hexdigest()[:50]
        mac = expected(endpoint.secrets[secret_index], timestamp, token)
        signature = {"timestamp": timestamp, "token": token, "signature": mac.hex()}
        signed = {"signature": signature, **{k: v for k, v in data.items() if k != "signature"}}
        return json.dumps(signed).encode(), {"Content-Type": "application/json"}
