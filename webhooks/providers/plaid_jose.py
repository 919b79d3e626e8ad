"""What Plaid's verifier (``plaid``) and its key fetcher (``plaid_keys``) share: base64url, the
JWT's JSON parts, a JWK as Plaid's key endpoint answers it, and where that endpoint may be
(``https://{production,sandbox,development}.plaid.com``, or a loopback address for a local fake).
It lives apart so that neither module has to import the other.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from cryptography.hazmat.primitives.asymmetric import ec

from webhooks.errors import VerificationError
from webhooks.vocabulary import Reason

PLAID_HOSTS = frozenset({"production.plaid.com", "sandbox.plaid.com", "development.plaid.com"})
LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})


def allowed_base(url: str) -> bool:
    """A Plaid API host over HTTPS, or a loopback address (a local fake); no path, credentials or query."""
    try:
        p = urlsplit(url)
        port = p.port
    except ValueError:
        return False
    if p.username or p.password or p.query or p.fragment or p.path not in ("", "/"):
        return False
    plaid = p.scheme == "https" and p.hostname in PLAID_HOSTS and port in (None, 443)
    return plaid or (p.scheme in ("http", "https") and p.hostname in LOOPBACK)


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def unb64url(part: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError) as exc:
        raise VerificationError(Reason.MALFORMED_SIGNATURE, "JWT part is not base64url") from exc


def json_part(part: str) -> dict[str, Any]:
    try:
        value = json.loads(unb64url(part))
    except (ValueError, UnicodeDecodeError) as exc:
        raise VerificationError(Reason.MALFORMED_SIGNATURE, "JWT part is not JSON") from exc
    if not isinstance(value, dict):
        raise VerificationError(Reason.MALFORMED_SIGNATURE, "JWT part is not a JSON object")
    return value


def public_key(jwk: Any) -> ec.EllipticCurvePublicKey:
    """The P-256 key of a JWK as Plaid's API answers it; ``ValueError`` for anything else."""
    if not isinstance(jwk, Mapping) or jwk.get("kty") != "EC" or jwk.get("crv") != "P-256":
        raise ValueError("not an EC P-256 JWK")
    if jwk.get("alg", "ES256") != "ES256" or jwk.get("use", "sig") != "sig":
        raise ValueError("not an ES256 signing key")
    try:
        x, y = (unb64url(str(jwk[c])) for c in ("x", "y"))
    except (KeyError, VerificationError) as exc:
        raise ValueError("JWK x/y missing or not base64url") from exc
    if len(x) != 32 or len(y) != 32:
        raise ValueError("JWK x/y are not 32 bytes")
    return ec.EllipticCurvePublicNumbers(int.from_bytes(x), int.from_bytes(y), ec.SECP256R1()).public_key()


def jwk_of(key: ec.EllipticCurvePublicKey, kid: str) -> dict[str, Any]:
    """The JWK Plaid's key endpoint would answer for ``key`` (pinned ``verification_key``, fakes)."""
    numbers = key.public_numbers()
    return {
        "alg": "ES256",
        "created_at": 1560466150,
        "crv": "P-256",
        "expired_at": None,
        "kid": kid,
        "kty": "EC",
        "use": "sig",
        "x": b64url(numbers.x.to_bytes(32)),
        "y": b64url(numbers.y.to_bytes(32)),
    }
