"""HTTP Basic for the console: user ``admin``, ``WEBHOOKS_ADMIN_PASSWORD``; 404 when unset."""

from __future__ import annotations

import base64
import binascii
import hmac

from flask import abort, current_app, request
from werkzeug.wrappers import Response


def check_auth() -> Response | None:
    password = current_app.extensions["webhooks"].settings.admin_password
    if not password:
        abort(404)
    scheme, _, token = (request.headers.get("Authorization") or "").partition(" ")
    try:
        given = base64.b64decode(token, validate=True) if scheme.lower() == "basic" else b""
    except (binascii.Error, ValueError):
        given = b""
    if not hmac.compare_digest(given, f"admin:{password}".encode()):
        return Response(
            '{"error": "unauthorized"}', 401,
            {"WWW-Authenticate": 'Basic realm="webhooks admin"', "Content-Type": "application/json"},
        )
    return None
