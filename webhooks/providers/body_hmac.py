"""The scheme Checkout.com, Paystack and Lemon Squeezy share: one header holding the hex HMAC of
the raw body, nothing else signed (no timestamp, no header, no URL)."""

from __future__ import annotations

import re

from webhooks.errors import VerificationError
from webhooks.providers.base import Endpoint, Request, first_match, hmac_digest, require
from webhooks.vocabulary import Reason

HEX = re.compile(r"[0-9a-fA-F]+")


def hex_signature(request: Request, header: str) -> bytes:
    """The header's digest; only bare hex (``bytes.fromhex`` would also take spaces)."""
    value = require(request, header)
    if not HEX.fullmatch(value) or len(value) % 2:
        raise VerificationError(Reason.MALFORMED_SIGNATURE, f"{header} is not hex")
    return bytes.fromhex(value)


def verify_body(request: Request, endpoint: Endpoint, header: str, algorithm: str) -> int:
    """The index of the secret whose hex HMAC of the body is in ``header``."""
    signature = hex_signature(request, header)
    return first_match(endpoint.secrets, lambda s: hmac_digest(s.encode(), request.body, algorithm), [signature])


def sign_body(endpoint: Endpoint, body: bytes, secret_index: int, algorithm: str) -> str:
    return hmac_digest(endpoint.secrets[secret_index].encode(), body, algorithm).hex()
