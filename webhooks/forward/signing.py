"""The forwarded request's headers: Standard Webhooks' signature, and what the service routes on.

``webhook-id`` is derived from (endpoint, event id, destination), so it is the same on every
retry, replay and reconciled copy of the event, and it is also the ``Idempotency-Key``. The
signature is ``v1,`` base64 HMAC-SHA256 over ``id.timestamp.body``, one per secret during a
rotation; ``webhook-timestamp`` is the attempt's time (the service's replay window).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Sequence
from typing import NamedTuple


class Message(NamedTuple):
    """What the headers describe: one delivery's event."""

    message_id: str
    endpoint: str
    event_id: str
    event_type: str
    object_type: str | None
    object_id: str | None
    object_version: int | None
    content_type: str


def message_id(endpoint: str, event_id: str, destination: str) -> str:
    digest = hashlib.sha256(f"{endpoint}\0{event_id}\0{destination}".encode("utf-8", "surrogatepass")).digest()
    return "msg_" + base64.b32encode(digest[:20]).decode().lower()


def signature(keys: Sequence[bytes], msg_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return " ".join("v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode() for key in keys)


def _header_value(value: str) -> str:
    """A value safe in a header line (ids come from providers: no CR, LF or other controls)."""
    return "".join(c if " " <= c <= "~" else "?" for c in value)[:500]


def headers(keys: Sequence[bytes], message: Message, timestamp: int, body: bytes) -> dict[str, str]:
    sent = {
        "Content-Type": message.content_type,
        "webhook-id": message.message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(keys, message.message_id, timestamp, body),
        "Idempotency-Key": message.message_id,
        "Webhooks-Endpoint": _header_value(message.endpoint),
        "Webhooks-Event-Id": _header_value(message.event_id),
        "Webhooks-Event-Type": _header_value(message.event_type),
    }
    if message.object_type is not None and message.object_id is not None:
        sent["Webhooks-Object"] = _header_value(f"{message.object_type}/{message.object_id}")
        if message.object_version is not None:
            sent["Webhooks-Object-Version"] = str(message.object_version)
    return sent
