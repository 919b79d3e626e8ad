"""The private keys ``sign`` uses for the kinds that sign with a provider's key pair (PayPal, SNS,
Plaid): ``options.signing_key``, a PEM, parsed once per process.

Parsing an RSA key checks it (cryptography's consistency check: about 0.05 s a 2048-bit key), and
``sign`` ran for every delivery ``webhooks send`` or ``webhooks.testing`` signed; the key itself was
already in memory, in the endpoint's options.
"""

from __future__ import annotations

from functools import lru_cache

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes


@lru_cache(maxsize=32)
def private_key(pem: str) -> PrivateKeyTypes:
    """The key in ``pem`` (unencrypted PKCS#8 or traditional PEM); raises ValueError as cryptography does."""
    return serialization.load_pem_private_key(pem.encode(), password=None)
