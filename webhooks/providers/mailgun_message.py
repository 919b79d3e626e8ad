"""The ``Message-Id`` of a Mailgun event's message: what the provider module (the object id) and its
API client (matching the delivered event to Mailgun's copy) both read, in a module of its own so
neither imports the other."""

from __future__ import annotations

from typing import Any


def message_id(data: Any) -> str | None:
    message = data.get("message") if isinstance(data, dict) else None
    headers = message.get("headers") if isinstance(message, dict) else None
    found = headers.get("message-id") if isinstance(headers, dict) else None
    return found if isinstance(found, str) and found else None
