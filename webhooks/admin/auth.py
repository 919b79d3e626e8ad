"""HTTP Basic for the console: user ``admin``, ``WEBHOOKS_ADMIN_PASSWORD``; 404 when unset.

Wrong passwords are throttled per client (``throttle.py``): after ``FREE`` of them the client is
answered 429 with ``Retry-After`` — even for the right password — until its wait is over; every
other client logs in as before. The client is ``REMOTE_ADDR``, or with ``WEBHOOKS_TRUSTED_PROXIES``
= N the address the N-th proxy from the end appended to ``X-Forwarded-For`` (what a client writes
there itself is never believed).
"""

from __future__ import annotations

import hmac
import logging

from flask import abort, current_app, jsonify, render_template, request
from werkzeug.wrappers import Response

from webhooks.admin.throttle import LoginThrottle
from webhooks.clients import sender
from webhooks.metrics import ADMIN_AUTH_FAILURES
from webhooks.receiver.quarantine import basic_credentials
from webhooks.runtime import Runtime
from webhooks.vocabulary import Reason

log = logging.getLogger(__name__)
WHO = "admin"  # the only HTTP user, named in the audit trail


def runtime() -> Runtime:
    """The app's runtime (settings, sessions, queue)."""
    rt: Runtime = current_app.extensions["webhooks"]
    return rt


def client() -> str:
    """The address the throttle counts this request under."""
    return sender(request.remote_addr, request.headers.getlist("X-Forwarded-For"), runtime().settings.trusted_proxies)


def check_auth() -> Response | None:
    password = runtime().settings.admin_password
    if not password:
        abort(404)
    throttle: LoginThrottle = current_app.extensions["webhooks_login_throttle"]
    who = client()
    given = request.headers.get("Authorization")
    right = hmac.compare_digest(basic_credentials(given), f"{WHO}:{password}".encode())
    if right or not given:  # no credentials yet (a browser's first request) is not a guess
        wait, last = throttle.wait(who), False
    else:
        wait, last = throttle.failed(who)
    if wait:
        ADMIN_AUTH_FAILURES.labels("throttled").inc()
        return _throttled(wait)
    if right:
        return None
    if given:
        ADMIN_AUTH_FAILURES.labels("unauthorized").inc()
    if last:  # one line when a client runs out of tries, not one a guess
        log.warning(
            "admin: %s has used its %s tries with wrong passwords; it may try once every %ss now",
            who,
            throttle.free,
            throttle.refill,
        )
    return Response(
        '{"error": "unauthorized"}',
        401,
        {"WWW-Authenticate": 'Basic realm="webhooks admin"', "Content-Type": "application/json"},
    )


def _throttled(wait: int) -> Response:
    response: Response
    if request.blueprint != "admin_pages":  # the API, /metrics
        response = jsonify(error=Reason.LOGIN_THROTTLED)
    else:
        response = Response(
            render_template(
                "message.html",
                title="Too many wrong passwords",
                message=f"Too many wrong passwords came from your address. Try again in {wait} seconds.",
            ),
            content_type="text/html; charset=utf-8",
        )
    response.status_code = 429
    response.headers["Retry-After"] = str(wait)
    return response
