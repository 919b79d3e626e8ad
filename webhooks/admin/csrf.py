"""CSRF protection for the console's HTML forms: a signed double-submit token.

The browser sends cached HTTP Basic credentials with any request to the console, including one a
hostile page makes it send, so Basic auth alone does not prove the operator meant a POST. Each
browser gets a random nonce in a ``SameSite=Strict`` cookie; forms carry ``HMAC(key, nonce)``,
keyed by a hash of the admin password (so every web process agrees, and a changed password voids
old tokens). Another site can neither read the cookie nor compute the token. A present ``Origin``
must also be ours. The JSON API relies on ``Content-Type: application/json`` instead (``api.py``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

from flask import current_app, g, request
from werkzeug.wrappers import Response

COOKIE = "wh_csrf"
FIELD = "csrf_token"


def _key() -> bytes:
    password = current_app.extensions["webhooks"].settings.admin_password or ""
    return hashlib.sha256(b"webhooks-csrf\0" + password.encode()).digest()


def _sign(nonce: str) -> str:
    digest = hmac.new(_key(), nonce.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def token() -> str:
    """The token for this browser's forms (starts a nonce cookie when there is none)."""
    nonce = request.cookies.get(COOKIE) or g.get("csrf_new_nonce")
    if not nonce:
        nonce = g.csrf_new_nonce = secrets.token_urlsafe(24)
    return _sign(nonce)


def set_cookie(response: Response) -> Response:
    """after_request: hand out a nonce to a browser that has none (minted while rendering, or now),
    so that every tab of one browser shares it."""
    if not request.cookies.get(COOKIE):
        token()
    nonce = g.get("csrf_new_nonce")
    if nonce:
        response.set_cookie(COOKIE, nonce, path="/admin", httponly=True, samesite="Strict",
                            secure=request.is_secure)
    return response


def valid() -> bool:
    """Whether this state-changing request carries a token for its own nonce, from our origin."""
    origin = request.headers.get("Origin")
    # Host only, not scheme: behind a TLS-terminating proxy the app sees http for an https page.
    if origin is not None and urlsplit(origin).netloc != urlsplit(request.host_url).netloc:
        return False
    nonce = request.cookies.get(COOKIE)
    given = request.form.get(FIELD, "")
    return bool(nonce) and hmac.compare_digest(given.encode(), _sign(nonce or "").encode())
