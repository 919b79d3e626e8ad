"""HTTP Basic for the console: user ``admin``, ``WEBHOOKS_ADMIN_PASSWORD``; 404 when unset."""

from __future__ import annotations

import hmac

from flask import abort, current_app, request
from werkzeug.wrappers import Response

from webhooks.quarantine import basic_credentials
from webhooks.runtime import Runtime

WHO = "admin"  # the only HTTP user, named in the audit trail


def runtime() -> Runtime:
    """The app's runtime (settings, sessions, queue)."""
    rt: Runtime = current_app.extensions["webhooks"]
    return rt


def check_auth() -> Response | None:
    password = runtime().settings.admin_password
    if not password:
        abort(404)
    if not hmac.compare_digest(basic_credentials(request.headers.get("Authorization")), f"{WHO}:{password}".encode()):
        return Response(
            '{"error": "unauthorized"}', 401,
            {"WWW-Authenticate": 'Basic realm="webhooks admin"', "Content-Type": "application/json"},
        )
    return None
