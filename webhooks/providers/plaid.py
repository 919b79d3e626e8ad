"""Plaid: ``Plaid-Verification: <JWT>``, an ES256 (ECDSA P-256, SHA-256) JSON Web Signature.

Signed string: the JWS signing input ``base64url(header) "." base64url(claims)``; the header is
``{"alg": "ES256", "kid": …, "typ": "JWT"}``, the claims ``{"iat": <unix s>, "request_body_sha256":
<hex SHA-256 of the raw body>}``; the signature is ``r || s`` (32 + 32 bytes), base64url. Any ``alg``
but ES256 (``none``, ``HS256``, ``RS256``…) is ``malformed_signature``, so no key of ours is ever read
as an HMAC secret. Plaid signs with its key, a JWK (``kty`` EC, ``crv`` P-256, ``x``/``y``
base64url) named by ``kid`` and fetched from ``/webhook_verification_key/get`` with the endpoint's
``client_id`` and ``secret`` (its ``secret``/``secrets`` field holds Plaid's API secret, never a MAC
key) through ``plaid_keys`` (Plaid hosts or loopback only, cached, bounded in time and rate); or pinned
as ``options["verification_key"]`` (that JWK, for offline set-ups and tests). A key whose
``expired_at`` is set is refused. Checked before any key is fetched: the JWT's shape, its ``alg``,
``iat`` within ``tolerance_seconds`` (default 300: Plaid's 5 minutes) both ways, and
``request_body_sha256`` against the body (constant time): a tampered body costs no fetch.
Event id: Plaid sends none; it is ``sha256:`` of the signing input (``content_id``), so one signature
(one ``iat``, one body hash: ECDSA's malleable ``s`` changes no id) is at most one event, and the
replay key is the same input. A retry Plaid signs again (new ``iat``) is a new event: Plaid's webhooks
are nudges to fetch (``item_id`` and a code), handlers act on what they fetch. Type:
``<webhook_type>.<webhook_code>`` (``TRANSACTIONS.SYNC_UPDATES_AVAILABLE``); the body's ``item_id``
is the searchable object id. Object and version: none (Plaid's bodies carry no update time).
``sign`` (tests, ``webhooks send`` against a fake) needs ``options["signing_key"]``: a PEM P-256 private
key, with ``options["key_id"]`` as its ``kid``.
Docs: https://plaid.com/docs/api/webhooks/webhook-verification/
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature

from webhooks.errors import ConfigError, PayloadError, VerificationError
from webhooks.providers.base import (
    DAY,
    Endpoint,
    Provider,
    Request,
    Verified,
    VerifiedEvent,
    check_timestamp,
    content_id,
    parse_json,
    replay_key,
    require,
)
from webhooks.providers.plaid_jose import allowed_base, b64url, json_part, public_key, unb64url
from webhooks.providers.signing_keys import private_key
from webhooks.vocabulary import Reason

HEADER = "Plaid-Verification"
SCHEME = "plaid-es256"
MAX_JWT = 2048  # a genuine one is about 400 characters
KID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")  # Plaid's are UUIDs
DEFAULT_KID = "00000000-0000-4000-8000-00000000dev0"
# (endpoint, kid, sender) -> the JWK Plaid answers for kid
KeyLoader = Callable[[Endpoint, str, str], Mapping[str, Any]]


def _pinned(endpoint: Endpoint) -> Mapping[str, Any] | None:
    value = endpoint.options.get("verification_key")
    if isinstance(value, str) and value.strip():
        value = json.loads(value)
    return value if isinstance(value, Mapping) else None


def _signing_key(endpoint: Endpoint) -> ec.EllipticCurvePrivateKey:
    key = private_key(str(endpoint.options["signing_key"]))
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise ValueError("options.signing_key is not a P-256 private key")
    return key


class Plaid(Provider):
    kind = "plaid"
    index_names_secret = False  # Plaid signs with its key; ``secrets`` hold its API secret
    retry_horizon = 2 * DAY  # retried for up to 24 hours when not answered 200 within 10 s
    shorthands = {"PLAID_CLIENT_ID": "client_id", "PLAID_SECRET": "secrets"}
    option_names = frozenset({"client_id", "api_base", "verification_key", "signing_key", "key_id"})
    signature_header_names = (HEADER,)

    def __init__(self, key_loader: KeyLoader | None = None) -> None:
        self.key_loader = key_loader

    def validate(self, endpoint: Endpoint) -> None:
        name, options = endpoint.name, endpoint.options
        try:
            pinned = _pinned(endpoint)
            if options.get("verification_key"):
                public_key(pinned)
        except ValueError as exc:
            raise ConfigError(f"endpoint {name!r}: options.verification_key is not an ES256 P-256 JWK") from exc
        client_id = options.get("client_id")
        credentials = (
            isinstance(client_id, str) and bool(client_id) and bool(endpoint.secrets) and all(endpoint.secrets)
        )
        if pinned is None and not credentials:
            raise ConfigError(f"endpoint {name!r}: client_id and secret are required (fail closed)")
        if options.get("api_base") and not allowed_base(str(options["api_base"])):
            raise ConfigError(f"endpoint {name!r}: options.api_base is neither a Plaid host nor loopback")
        if options.get("signing_key"):
            try:
                _signing_key(endpoint)
            except ValueError as exc:
                raise ConfigError(f"endpoint {name!r}: options.signing_key is not a P-256 PEM key") from exc
        if options.get("key_id") and not KID.fullmatch(str(options["key_id"])):
            raise ConfigError(f"endpoint {name!r}: options.key_id is not a key id")

    def _key(self, endpoint: Endpoint, kid: str, sender: str) -> Mapping[str, Any]:
        pinned = _pinned(endpoint)
        if pinned is not None:
            if pinned.get("kid") != kid:
                raise VerificationError(Reason.SIGNATURE_MISMATCH, "kid is not the pinned key's")
            return pinned
        if self.key_loader is not None:
            return self.key_loader(endpoint, kid, sender)
        from webhooks.providers import plaid_keys  # I/O: loaded only when a key must be fetched

        return plaid_keys.default_loader(endpoint, kid, sender)

    def verify(self, request: Request, endpoint: Endpoint, *, now: float) -> Verified:
        token = require(request, HEADER)
        parts = token.split(".") if len(token) <= MAX_JWT else []
        if len(parts) != 3:
            raise VerificationError(Reason.MALFORMED_SIGNATURE, f"{HEADER} is not a compact JWS")
        header, claims, signature = json_part(parts[0]), json_part(parts[1]), unb64url(parts[2])
        if header.get("alg") != "ES256":
            raise VerificationError(Reason.MALFORMED_SIGNATURE, "alg is not ES256")
        kid, iat, digest = header.get("kid"), claims.get("iat"), claims.get("request_body_sha256")
        if not isinstance(kid, str) or not KID.fullmatch(kid) or len(signature) != 64:
            raise VerificationError(Reason.MALFORMED_SIGNATURE, "no kid, or not an ES256 signature")
        if type(iat) is not int or not isinstance(digest, str):
            raise VerificationError(Reason.MALFORMED_SIGNATURE, "no iat or request_body_sha256 claim")
        signed_at = check_timestamp(str(iat), now, endpoint.tolerance_seconds)
        if not hmac.compare_digest(digest.encode(), hashlib.sha256(request.body).hexdigest().encode()):
            raise VerificationError(Reason.SIGNATURE_MISMATCH, "request_body_sha256 is not the body's")
        jwk = self._key(endpoint, kid, request.sender)
        if jwk.get("expired_at") is not None:
            raise VerificationError(Reason.SIGNATURE_MISMATCH, "the key has expired")
        try:
            key = public_key(jwk)
        except ValueError as exc:
            raise VerificationError(Reason.SIGNATURE_MISMATCH, f"key {kid!r}: {exc}") from exc
        signing_input = f"{parts[0]}.{parts[1]}".encode()
        der = encode_dss_signature(int.from_bytes(signature[:32]), int.from_bytes(signature[32:]))
        try:
            key.verify(der, signing_input, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            raise VerificationError(Reason.SIGNATURE_MISMATCH, "signature does not verify") from None
        body = parse_json(request.body)
        kind, code = (body.get("webhook_type"), body.get("webhook_code")) if isinstance(body, dict) else (None, None)
        if not isinstance(kind, str) or not kind or not isinstance(code, str) or not code:
            raise PayloadError("no webhook_type or webhook_code")
        item = body.get("item_id")
        event = VerifiedEvent(
            content_id(signing_input),
            f"{kind}.{code}",
            secret_index=0,  # one key: Plaid's, named by kid
            signed_at=signed_at,
            object_id=item if isinstance(item, str) and item else None,
        )
        return Verified([event], SCHEME, replay_key=replay_key(SCHEME, signing_input))

    def sign(
        self, endpoint: Endpoint, body: bytes, *, now: float, secret_index: int = 0, url: str = ""
    ) -> tuple[bytes, dict[str, str]]:
        if not endpoint.options.get("signing_key"):
            raise NotImplementedError("plaid signs with Plaid's key: set options.signing_key (PEM P-256) to sign")
        kid = str(endpoint.options.get("key_id") or DEFAULT_KID)
        header = b64url(json.dumps({"alg": "ES256", "kid": kid, "typ": "JWT"}, separators=(",", ":")).encode())
        claims = {"iat": int(now), "request_body_sha256": hashlib.sha256(body).hexdigest()}
        signing_input = f"{header}.{b64url(json.dumps(claims, separators=(',', ':')).encode())}"
        r, s = decode_dss_signature(_signing_key(endpoint).sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
        token = f"{signing_input}.{b64url(r.to_bytes(32) + s.to_bytes(32))}"
        return body, {HEADER: token, "Content-Type": "application/json"}
