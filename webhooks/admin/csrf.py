"""CSRF protection for the console's HTML forms: a signed double-submit token.

The browser sends cached HTTP Basic credentials with any request to the console, including one a
hostile page makes it send, so Basic auth alone does not prove the operator meant a POST. Each
browser gets a random nonce in a ``SameSite=Strict`` cookie; forms carry ``HMAC(key, nonce)``,
keyed by a hash of the admin password (so every web process agrees, and a changed password voids
old tokens). Another site can neither read the cookie nor compute the token. A present ``Origin``
must also be ours (``same_origin``, the rule the JSON API uses too, with
``Content-Type: application/json`` instead of a token: ``api.py``).
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
SAFE = frozenset({"GET", "HEAD", "OPTIONS"})  # every other method changes state and is guarded


def changes_state(method: str) -> bool:
    """Whether a request of ``method`` is one the CSRF rule guards (POST, PATCH, DELETE, PUT …)."""
    return method.upper() not in SAFE


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
        response.set_cookie(
            COOKIE,
            nonce,
            path=request.script_root + "/admin",
            httponly=True,
            samesite="Strict",
            secure=scheme() == "https",
        )
    return response


def scheme() -> str:
    """The scheme the browser used: a TLS-terminating proxy's ``X-Forwarded-Proto`` (its first
    value) when it says http or https, else the request's own."""
    forwarded = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
    return forwarded if forwarded in ("http", "https") else request.scheme


def _site(url: str) -> tuple[str, str, int | None] | None:
    """(scheme, host, port) with the default port filled in; None for anything unparsable."""
    try:
        parts = urlsplit(url)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    except ValueError:
        return None
    return (parts.scheme.lower(), parts.hostname, port) if parts.hostname else None


def same_origin() -> bool:
    """The console's one origin rule (HTML forms and JSON API alike): a POST, PATCH or DELETE
    (``changes_state``) that the browser marks
    as coming from another site (``Sec-Fetch-Site``), or whose ``Origin`` is not this scheme, host
    and port, is refused. The scheme honours ``X-Forwarded-Proto`` (``scheme``), so an https page
    behind a proxy that speaks http to us still matches its own origin; a cross-site page cannot
    add that header to a browser's request (it is not CORS-safelisted and we answer no preflight).
    Without ``Origin`` (curl, old browsers) the caller's own check decides."""
    if request.headers.get("Sec-Fetch-Site") in ("cross-site", "same-site"):
        return False
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    ours = _site(f"{scheme()}://{request.host}")
    return ours is not None and _site(origin) == ours


def valid() -> bool:
    """Whether this state-changing request carries a token for its own nonce, from our origin."""
    if not same_origin():
        return False
    nonce = request.cookies.get(COOKIE)
    given = request.form.get(FIELD, "")
    return bool(nonce) and hmac.compare_digest(given.encode(), _sign(nonce or "").encode())
