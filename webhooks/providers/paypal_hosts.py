"""Where PayPal's signing certificates may come from: ``https://{api,api-m}[.sandbox].paypal.com
/v1/notifications/certs/<id>`` (port 443, no credentials, query or fragment; the id one path
segment of at most 128 letters, digits, ``-``, ``_`` or ``.`` (not first), e.g. ``CERT-360caa42-fca2a594-a5cafa77``).

Both the verifier (``paypal``) and the fetcher (``paypal_certs``) check a ``PAYPAL-CERT-URL``
against this rule; it lives apart so that neither has to import the other.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

CERT_HOSTS = frozenset({"api.paypal.com", "api.sandbox.paypal.com", "api-m.paypal.com", "api-m.sandbox.paypal.com"})
CERT_PATH = "/v1/notifications/certs/"
CERT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def is_paypal_cert_url(url: str) -> bool:
    try:
        p = urlsplit(url)
        port = p.port
    except ValueError:  # "host:abc", "[::1": not a URL at all
        return False
    return (
        p.scheme == "https"
        and p.hostname in CERT_HOSTS
        and port in (None, 443)
        and not p.username
        and p.path.startswith(CERT_PATH)
        and CERT_ID.fullmatch(p.path[len(CERT_PATH) :]) is not None
        and not p.query
        and not p.fragment
    )
