"""Standard Webhooks and Svix: ``webhook-id``, ``webhook-timestamp``, ``webhook-signature``.

Svix sends the same three headers as ``svix-id``, ``svix-timestamp``, ``svix-signature``.
Signed string: ``f"{id}.{timestamp}.{body}"``. The signature header is a space-separated list of
``v1,<base64 HMAC-SHA256>`` (key: base64-decode the secret after stripping ``whsec_``) and
``v1a,<base64 Ed25519>`` (public key ``whpk_<base64 of the raw 32 bytes>``, pinned in the
endpoint's secrets, never taken from the request). Secrets may mix ``whsec_`` and ``whpk_``.
Entries without a comma, of an unknown version, not base64 or of the wrong length (``v1``: 32
bytes, ``v1a``: 64) are skipped; if nothing usable is left the request fails. An HMAC is made only
with a ``whsec_`` secret and a ``v1a`` checked only with a ``whpk_`` key (``secret_index`` keeps the
position in ``secrets``); a secret that decodes to an empty key is refused at start-up.
Cheapest checks first: the timestamp window and the id's length (255) are checked before any
crypto, and a header of more than ``MAX_SIGNATURES`` (16) entries is ``too_many_signatures``.
Replay window: ``tolerance_seconds`` both ways. The id is signed: no replay key.
Event id: ``webhook-id`` (the same on every retry); type: the body's ``type`` (or ``event_type``).
Docs: https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import secrets

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from webhooks.errors import ConfigError, PayloadError, VerificationError
from webhooks.providers.base import (
    DAY,
    Endpoint,
    Provider,
    Request,
    Verified,
    VerifiedEvent,
    capped_split,
    check_timestamp,
    first_match,
    hmac_digest,
    parse_json,
    require,
)
from webhooks.vocabulary import Reason

PUBLIC_PREFIX = "whpk_"
SECRET_PREFIX = "whsec_"
LENGTHS = {"v1": 32, "v1a": 64}  # HMAC-SHA256, Ed25519
MAX_ID = 255  # what the events table keeps (the receiver refuses longer ids after verifying)


def _b64(value: str) -> bytes:
    # Svix secrets are often unpadded base64.
    return base64.b64decode(value + "=" * (-len(value) % 4), validate=True)


def _hmac_key(secret: str) -> bytes:
    return _b64(secret.removeprefix(SECRET_PREFIX))


def _public_key(secret: str) -> Ed25519PublicKey:
    return Ed25519PublicKey.from_public_bytes(_b64(secret.removeprefix(PUBLIC_PREFIX)))


def _parse(header: str, name: str) -> tuple[list[bytes], list[bytes], int]:
    """(v1 signatures, v1a signatures, number of entries) from a signature header."""
    v1: list[bytes] = []
    v1a: list[bytes] = []
    entries = capped_split(header, None, name)
    for entry in entries:
        version, sep, value = entry.partition(",")
        if not sep or version not in LENGTHS:
            continue
        try:
            decoded = _b64(value)
        except (binascii.Error, ValueError):
            continue
        if len(decoded) == LENGTHS[version]:
            (v1 if version == "v1" else v1a).append(decoded)
    return v1, v1a, len(entries)


class Standard(Provider):
    kind = "standard"
    retry_horizon = 2 * DAY  # Svix: about 1.5 days
    shorthands = {"STANDARD_WEBHOOK_SECRET": "secrets"}

    def issue_secret(self) -> str:
        """As Svix makes them: ``whsec_`` + base64 of 24 random bytes (also a destination's shape)."""
        return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode("ascii")

    def validate(self, endpoint: Endpoint) -> None:
        super().validate(endpoint)
        for secret in endpoint.secrets:
            try:
                if secret.startswith(PUBLIC_PREFIX):
                    _public_key(secret)
                elif not _hmac_key(secret):
                    raise ValueError("empty key")
            except (binascii.Error, ValueError) as exc:
                raise ConfigError(
                    f"endpoint {endpoint.name!r}: a secret is neither whsec_<base64 of a non-empty key> "
                    "nor whpk_<base64 32 bytes>"
                ) from exc

    def verify(self, request: Request, endpoint: Endpoint, *, now: float) -> Verified:
        svix = request.header("webhook-signature") is None and request.header("svix-signature") is not None
        prefix = "svix" if svix else "webhook"
        header = require(request, f"{prefix}-signature")
        msg_id = require(request, f"{prefix}-id")
        timestamp = require(request, f"{prefix}-timestamp")
        # Refuse by the cheapest check first: a stale or far-future delivery costs no HMAC or Ed25519.
        ts = check_timestamp(timestamp, now, endpoint.tolerance_seconds)
        if len(msg_id) > MAX_ID:
            raise PayloadError(f"{prefix}-id is longer than {MAX_ID} characters")
        v1, v1a, entries = _parse(header, f"{prefix}-signature")
        if not v1 and not v1a:
            reason = Reason.MALFORMED_SIGNATURE if entries else Reason.MISSING_SIGNATURE
            raise VerificationError(reason, f"{prefix}-signature has no usable v1 or v1a entry")
        signed = f"{msg_id}.{timestamp}.".encode() + request.body
        index, scheme = self._match(endpoint.secrets, signed, v1, v1a)
        body = parse_json(request.body)
        event_type = "unknown"
        if isinstance(body, dict):
            found = body.get("type", body.get("event_type"))
            event_type = found if isinstance(found, str) and found else "unknown"
        event = VerifiedEvent(msg_id, event_type, secret_index=index, signed_at=ts)
        return Verified([event], f"{'svix' if svix else 'standard'}-{scheme}")

    def _match(self, secrets: tuple[str, ...], signed: bytes, v1: list[bytes], v1a: list[bytes]) -> tuple[int, str]:
        # Split by type, keeping each secret's position: an HMAC is never made with a public key.
        macs = [(i, s) for i, s in enumerate(secrets) if not s.startswith(PUBLIC_PREFIX)]
        if v1 and macs:
            try:
                found = first_match([s for _, s in macs], lambda s: hmac_digest(_hmac_key(s), signed), v1)
                return macs[found][0], "v1"
            except VerificationError:
                pass
        for index, secret in enumerate(secrets):
            if not secret.startswith(PUBLIC_PREFIX):
                continue
            key = _public_key(secret)
            for signature in v1a:
                try:
                    key.verify(signature, signed)
                    return index, "v1a"
                except InvalidSignature:
                    pass
        raise VerificationError(Reason.SIGNATURE_MISMATCH, "no configured secret or public key matches")

    def sign(
        self, endpoint: Endpoint, body: bytes, *, now: float, secret_index: int = 0, url: str = ""
    ) -> tuple[bytes, dict[str, str]]:
        secret = endpoint.secrets[secret_index]
        if secret.startswith(PUBLIC_PREFIX):
            raise NotImplementedError(
                f"secret {secret_index} of endpoint {endpoint.name!r} is a whpk_ public key: "
                "v1a needs the sender's private key; sign with a whsec_ secret"
            )
        ts = str(int(now))
        msg_id = "msg_" + hashlib.sha256(ts.encode() + b"." + body).hexdigest()[:27]
        mac = hmac_digest(_hmac_key(secret), f"{msg_id}.{ts}.".encode() + body)
        return body, {
            "webhook-id": msg_id,
            "webhook-timestamp": ts,
            "webhook-signature": "v1," + base64.b64encode(mac).decode(),
            "Content-Type": "application/json",
        }
