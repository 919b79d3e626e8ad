"""Errors of the console in the caller's language: JSON for the API, a short HTML page for the pages.

A database or Redis that does not answer is a 503 with ``Retry-After`` naming what is down; any
other unexpected error is a 500 that names nothing but is logged with its traceback. Neither
ever shows a traceback or Werkzeug's debugger. HTTP errors raised on purpose (``abort(404)``)
pass through unchanged on the pages; under ``/admin/api`` every HTTP error, the router's own
404 and 405 included, is JSON ``{"error": "<reason>"}`` (``api_http_error``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

import redis
from flask import Blueprint, jsonify, render_template, request
from sqlalchemy import exc as sa_exc
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response

from webhooks.vocabulary import Reason

log = logging.getLogger(__name__)
RETRY_AFTER = "30"
# Errors of a database that cannot answer now (down, failing over, pool exhausted), as opposed
# to a query that is wrong, which is a bug (500).
DATABASE_DOWN = (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError, sa_exc.DisconnectionError)
SERVICES = {"database": "the database", "redis": "Redis"}

Answer = Response | tuple[Response | str, int, dict[str, str]] | tuple[Response | str, int]


def down(exc: BaseException) -> str | None:
    """``"database"`` or ``"redis"`` when ``exc`` (or what caused it) says that service is down."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, DATABASE_DOWN):
            return "database"
        if isinstance(seen, redis.RedisError):
            return "redis"
        seen = seen.__cause__ or seen.__context__
    return None


def init(bp: Blueprint, answer: Callable[[str | None, int], Answer]) -> None:
    """Register the handlers on ``bp``; ``answer(service, status)`` renders its reply (service None: 500)."""

    @bp.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Answer | HTTPException:
        if isinstance(exc, HTTPException):
            return exc
        service = down(exc)
        if service is not None:
            log.warning("admin: %s unavailable (%s: %s)", service, exc.__class__.__name__, str(exc)[:200])
            return answer(service, 503)
        log.exception("admin: unexpected error")
        return answer(None, 500)


API = "/admin/api"
# The receiver's words where it has one for the same refusal; otherwise Werkzeug's name of the
# status, as a word (405: ``method_not_allowed``).
HTTP_REASONS = {404: Reason.NOT_FOUND, 413: Reason.PAYLOAD_TOO_LARGE}


def init_api(bp: Blueprint) -> None:
    """JSON for every HTTP error under ``/admin/api``: a route's (``abort``, Werkzeug's 400 and
    413) on the blueprint, and the router's (no such route, wrong method), which is raised before
    any blueprint is chosen, on the app for that path prefix."""
    bp.register_error_handler(HTTPException, api_http_error)
    bp.app_errorhandler(HTTPException)(api_http_error)


def api_http_error(exc: HTTPException) -> Answer | HTTPException:
    if not (request.path == API or request.path.startswith(API + "/")) or exc.code is None or exc.code < 400:
        return exc  # another app route's error, or a redirect: Flask's own answer
    reason = HTTP_REASONS.get(exc.code) or re.sub(r"[^a-z0-9]+", "_", (exc.name or "error").lower()).strip("_")
    headers = {k: v for k, v in exc.get_headers() if k.lower() != "content-type"}  # keeps 405's Allow
    return jsonify(error=reason), exc.code, headers


def api_answer(service: str | None, status: int) -> Answer:
    if service is None:
        return jsonify(error="internal"), status
    return jsonify(error="unavailable", detail=f"{service} unavailable"), status, {"Retry-After": RETRY_AFTER}


def page_answer(service: str | None, status: int) -> Answer:
    if service is None:
        title, message = (
            "Internal error",
            (
                "Something went wrong on our side; the details are in the server "
                "log. Try again, and report it if it persists."
            ),
        )
    else:
        title = f"{SERVICES[service][0].upper()}{SERVICES[service][1:]} is unavailable"
        message = (
            f"{SERVICES[service][0].upper()}{SERVICES[service][1:]} is not answering right now, so this "
            f"page cannot be shown. Try again in a moment."
        )
    try:
        html = render_template("message.html", title=title, message=message)
    except Exception:  # the page itself failed to render: plain words still beat a traceback
        log.exception("admin: error page failed to render")
        html = f"<!doctype html><title>{title}</title><p>{message}</p>"
    headers = {"Content-Type": "text/html; charset=utf-8"}
    if service is not None:
        headers["Retry-After"] = RETRY_AFTER
    return html, status, headers
