"""A self-signed stand-in for PayPal's signing certificate and its key: the PayPal tests' and the fuzzers'."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

NOW = 1_700_000_000  # the fixed moment the PayPal tests sign at
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
KEY_PEM = KEY.private_bytes(
    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
).decode()


def certificate(
    cn: str = "messageverificationcerts.sandbox.paypal.com", *, days: int = 365, start: float = NOW - 86400
) -> bytes:
    """A self-signed stand-in for PayPal's certificate (PayPal's chains to a public root; see paypal_certs)."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    begin = datetime.fromtimestamp(start, UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(KEY.public_key())
        .serial_number(1)
        .not_valid_before(begin)
        .not_valid_after(begin + timedelta(days=days))
        .sign(KEY, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


CERT = certificate()
