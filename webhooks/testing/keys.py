"""Test key material for the kinds that verify with a provider's keys, made the documented way
``webhooks send`` signs with them (endpoint options, docs/providers/*.md): PayPal and SNS pin a
``certificate`` and sign with its ``signing_key``; SendGrid verifies with a public key and signs with
``signing_key``; Plaid pins a ``verification_key`` (a JWK) and signs with ``signing_key`` and
``key_id``. Fresh keys each call: nothing here is a secret of anyone's."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

PLAID_KID = "bfbd5111-8e33-4643-8ced-b2e642a72f3c"


def certificate(common_name: str = "messageverificationcerts.sandbox.paypal.com") -> tuple[str, str]:
    """A self-signed RSA certificate valid for 30 days and its private key: (certificate PEM, key PEM)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=30))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return cert.public_bytes(serialization.Encoding.PEM).decode(), key_pem


def sendgrid_pair() -> tuple[str, str]:
    """A P-256 pair as SendGrid's options take it: (public key, private key), base64 DER."""
    key = ec.generate_private_key(ec.SECP256R1())
    public = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    private = key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return base64.b64encode(public).decode(), base64.b64encode(private).decode()


def plaid_pair(kid: str = PLAID_KID) -> tuple[str, str]:
    """A P-256 signing key (PEM) and its JWK as Plaid's key endpoint answers it (JSON)."""
    from webhooks.providers.plaid_jose import jwk_of

    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return pem.decode(), json.dumps(jwk_of(key.public_key(), kid))
