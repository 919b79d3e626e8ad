"""Who may use the console: HTTP Basic (user ``admin``, ``WEBHOOKS_ADMIN_PASSWORD``; 404 when
unset) on the pages, the API and ``/metrics``; on ``/admin/api`` also a named token
(``Authorization: Bearer wht_…``, ``webhooks.admin.tokens``), which works with no password set. A
request's ``g.admin_who`` is the token's name or ``admin``: the audit's ``who`` (``who()``). An
unknown or revoked token is 401, a read-only token's POST, PATCH or DELETE 403 ``read_only``.

Wrong passwords and wrong tokens are throttled per client, in the same buckets (``throttle.py``):
after ``FREE`` of them the client is answered 429 with ``Retry-After`` — even for the right
password or token — until its wait is over; every other client logs in as before. The client is
``REMOTE_ADDR``, or with ``WEBHOOKS_TRUSTED_PROXIES`` = N the address the N-th proxy from the end
appended to ``X-Forwarded-For`` (what a client writes there itself is never believed).
"""

from __future__ import annotations

import hmac
import logging
from datetime import UTC, datetime

from flask import abort, current_app, g, jsonify, render_template, request
from werkzeug.wrappers import Response

from webhooks.admin import tokens
from webhooks.admin.csrf import changes_state
from webhooks.admin.throttle import LoginThrottle
from webhooks.metrics import ADMIN_AUTH_FAILURES
from webhooks.receiver.clients import sender
from webhooks.receiver.quarantine import basic_credentials
from webhooks.runtime import Runtime
from webhooks.vocabulary import Reason

log = logging.getLogger(__name__)
WHO = "admin"  # the password's user, and its name in the audit trail


def runtime() -> Runtime:
    """The app's runtime (settings, sessions, queue)."""
    rt: Runtime = current_app.extensions["webhooks"]
    return rt


def client() -> str:
    """The address the throttle counts this request under."""
    return sender(request.remote_addr, request.headers.getlist("X-Forwarded-For"), runtime().settings.trusted_proxies)


def who() -> str:
    """Who made this request, for the audit: the token's name, or ``admin`` (the password)."""
    return str(g.get("admin_who", WHO))


def check_auth() -> Response | None:
    """The pages' and ``/metrics``' gate: the password; 404 when none is set (the console is off)."""
    password = runtime().settings.admin_password
    if not password:
        abort(404)
    throttle: LoginThrottle = current_app.extensions["webhooks_login_throttle"]
    address = client()
    right, wait, last = password_check(throttle, address, request.headers.get("Authorization"), password)
    if wait:
        return _throttled(wait)
    if right:
        g.admin_who = WHO
        return None
    return _unauthorized(address, last, "Basic", "passwords")


def password_check(throttle: LoginThrottle, address: str, given: str | None, password: str) -> tuple[bool, int, bool]:
    """The admin password in an HTTP Basic ``Authorization`` value, under the login throttle (the web's
    ``/metrics`` and console, the worker's ``/metrics``): (right, seconds to wait, last free try)."""
    right = hmac.compare_digest(basic_credentials(given), f"{WHO}:{password}".encode())
    if right or not given:  # no credentials yet (a browser's first request) is not a guess
        wait, last = throttle.wait(address), False
    else:
        wait, last = throttle.failed(address)
    if wait:
        ADMIN_AUTH_FAILURES.labels("throttled").inc()
    elif given and not right:
        ADMIN_AUTH_FAILURES.labels("unauthorized").inc()
    return right and not wait, wait, last


def check_api_auth() -> Response | None:
    """``/admin/api``'s gate: a Bearer token (password or not), else the password as above."""
    scheme, _, credential = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return check_auth()
    throttle: LoginThrottle = current_app.extensions["webhooks_login_throttle"]
    address = client()
    wait = throttle.wait(address)  # a throttled client's flood never reaches the database
    if wait:
        ADMIN_AUTH_FAILURES.labels("throttled").inc()
        return _throttled(wait)
    with runtime().deferred_sessions() as session:
        found = tokens.authenticate(session, credential.strip(), now=datetime.now(UTC))
    if found is None:
        wait, last = throttle.failed(address)
        if wait:
            ADMIN_AUTH_FAILURES.labels("throttled").inc()
            return _throttled(wait)
        ADMIN_AUTH_FAILURES.labels("unauthorized").inc()
        return _unauthorized(address, last, "Bearer", "tokens")
    g.admin_who, g.admin_token = found.name, True
    if found.read_only and changes_state(request.method):
        response = jsonify(error=Reason.READ_ONLY, detail=f"the token {found.name!r} is read-only")
        response.status_code = 403
        return response
    return None


def _unauthorized(address: str, last: bool, scheme: str, what: str) -> Response:
    throttle: LoginThrottle = current_app.extensions["webhooks_login_throttle"]
    if last:  # one line when a client runs out of tries, not one a guess
        log.warning(
            "admin: %s has used its %s tries with wrong %s; it may try once every %ss now",
            address,
            throttle.free,
            what,
            throttle.refill,
        )
    body = '{"error": "unauthorized"}'
    if scheme == "Bearer":  # the same words for an unknown and a revoked token: no oracle
        body = '{"error": "unauthorized", "detail": "unknown or revoked token"}'
    return Response(
        body,
        401,
        {"WWW-Authenticate": f'{scheme} realm="webhooks admin"', "Content-Type": "application/json"},
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
