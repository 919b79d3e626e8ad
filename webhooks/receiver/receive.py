"""``POST /webhooks/<endpoint>`` (and a kind's GET handshake): verify, store, enqueue, answer — and nothing slow."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlsplit

from flask import Blueprint, Flask, Response, current_app, jsonify, request
from sqlalchemy.exc import SQLAlchemyError
from werkzeug.http import HTTP_STATUS_CODES
from werkzeug.wsgi import get_content_length, get_host, get_input_stream

from webhooks import metrics, providers, tracing
from webhooks.errors import PayloadError, UnavailableError, VerificationError
from webhooks.providers.base import Endpoint, Request, Verified
from webhooks.receiver import batch, clients, quarantine, rows
from webhooks.receiver import last_matched as matches
from webhooks.receiver.ratelimit import RateLimits
from webhooks.receiver.request_headers import environ_headers
from webhooks.runtime import Runtime
from webhooks.tables import revisions
from webhooks.vocabulary import Reason

log = logging.getLogger("webhooks.receive")  # the name the docs and log filters know
bp = Blueprint("receive", __name__)
CHUNK = 64 * 1024
# Refusals no re-verify can ever turn into a delivery: the quarantine keeps their headers, not
# their body (a 1 MB junk form would cost its write, twenty times a genuine delivery's CPU).
BODY_NOT_KEPT = frozenset({Reason.PAYLOAD_TOO_LARGE, Reason.TOO_MANY_SIGNATURES, Reason.TOO_MANY_PARAMETERS})
RECEIVED = b'{"received":true}\n'  # what jsonify(received=True) writes, without its cost per request


def raw_url(environ: dict[str, Any]) -> str:
    """The request URL as the client sent it: escapes intact, unlike Werkzeug's ``request.url``.

    Schemes that sign the URL (Twilio) must see the bytes the sender signed; gunicorn and
    Werkzeug keep the request target in ``RAW_URI`` / ``REQUEST_URI``.
    """
    target = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    if not target:
        query = environ.get("QUERY_STRING", "")
        target = quote(environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")) + (f"?{query}" if query else "")
    if not target.startswith("/"):  # absolute-form request target: keep only its path and query
        parts = urlsplit(target)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    # WSGI carries the raw bytes as latin-1; a client that sent raw UTF-8 gets it back as such.
    target = target.encode("latin-1", "replace").decode("utf-8", "replace")
    return f"{environ['wsgi.url_scheme']}://{get_host(environ)}{target}"


def read_body(environ: dict[str, Any], limit: int, idle_timeout: float) -> bytes:
    """Read at most ``limit`` + 1 bytes; more is a 413 (checked while reading: chunked bodies too).

    Reads in a loop: a WSGI stream may return short reads before the end of the body. Under
    gunicorn a client that stops sending for ``idle_timeout`` seconds gets a 408 instead of
    holding a thread, and so does one that drips bytes past the worker's body deadline
    (``webhooks.service.gunicorn_worker``).
    """
    length = get_content_length(environ)
    if length is not None and length > limit:
        raise VerificationError(Reason.PAYLOAD_TOO_LARGE, status=413)
    client = environ.get("gunicorn.socket")
    if client is not None and idle_timeout:
        client.settimeout(idle_timeout)  # gunicorn sets it blocking again for the next request
    stream = get_input_stream(environ)  # what Werkzeug's ``request.stream`` is
    chunks, size = [], 0
    while size <= limit:
        try:
            chunk = stream.read(min(CHUNK, limit + 1 - size))
        except TimeoutError as exc:  # socket.timeout is TimeoutError, and so is the worker's body deadline
            idle = exc.args == ("timed out",)  # the socket's own: this read's idle timeout
            raise VerificationError(
                Reason.REQUEST_TIMEOUT, f"no data for {idle_timeout} s" if idle else str(exc), status=408
            ) from exc
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > limit:
        raise VerificationError(Reason.PAYLOAD_TOO_LARGE, status=413)
    return b"".join(chunks)


def live_at(endpoint: Endpoint, now: float) -> Endpoint | None:
    """``endpoint`` with only the secrets live at ``now`` (``Endpoint.windows``); None when none is."""
    if not endpoint.windows:
        return endpoint
    keep = [
        i
        for i, (starts, ends) in enumerate(endpoint.windows)
        if (starts is None or starts <= now) and (ends is None or now < ends)
    ]
    if len(keep) == len(endpoint.secrets):
        return endpoint
    if not keep:
        return None
    return replace(
        endpoint,
        secrets=tuple(endpoint.secrets[i] for i in keep),
        secret_ids=tuple(endpoint.secret_ids[i] for i in keep) if endpoint.secret_ids else (),
        windows=tuple(endpoint.windows[i] for i in keep),
    )


def verify(endpoint: Endpoint, req: Request, now: float) -> Verified:
    """The provider's verdict; an unexpected exception is a forged or broken request, never a 500."""
    try:
        return providers.get(endpoint.kind).verify(req, endpoint, now=now)
    except (VerificationError, UnavailableError):
        raise
    except Exception as exc:
        # A provider bug on hostile input (the fuzz tests hunt these): refuse with one line; the
        # traceback only at debug (hostile senders must not fill the log with them).
        log.error("verify of endpoint %r raised %s", endpoint.name, exc.__class__.__name__)
        log.debug("verify of endpoint %r raised", endpoint.name, exc_info=True)
        raise PayloadError("unexpected verification error") from exc


@dataclass(frozen=True)
class Delivery:
    """What became of one verified delivery: the ids that were new, and whether it re-used the
    signature of an event stored under another id (a replay, answered as a duplicate)."""

    verified: Verified
    new: list[str] = field(default_factory=list)
    replayed: bool = False

    @property
    def outcome(self) -> str:
        return "stored" if self.new else "duplicate"


def accept(rt: Runtime, name: str, headers: dict[str, str], body: bytes, url: str, *, now: float) -> Verified:
    """Verify, store and enqueue one delivery; raises ``VerificationError`` or ``UnavailableError``."""
    return deliver(rt, name, headers, body, url, now=now).verified


def deliver(
    rt: Runtime,
    name: str,
    headers: dict[str, str],
    body: bytes,
    url: str,
    *,
    now: float,
    sender: str = "",
    method: str = "POST",
) -> Delivery:
    """``accept``, telling what became of the delivery."""
    configured = rt.settings.endpoints.get(name)
    if configured is None:
        raise VerificationError(Reason.UNKNOWN_ENDPOINT, status=404)
    endpoint = live_at(configured, now)  # a secret verifies inside its window only
    if endpoint is None:
        raise VerificationError(Reason.NO_LIVE_SECRET, "the endpoint has no live signing secret")
    req = Request({k.lower(): v for k, v in headers.items()}, body, url, method=method, sender=sender)
    with tracing.span("verify", endpoint=endpoint.name, kind=endpoint.kind) as traced:
        verified = verify(endpoint, req, now)
        traced.set("outcome", "verified")
    if endpoint.secret_ids:  # a database endpoint: its last_matched_at, noted in memory (``matches``)
        matches.of(rt).note(endpoint, verified)
    rows.check_storable(verified)
    new: list[str] = []
    replayed = False
    if verified.events:
        committer = batch.committer(rt)
        if committer.known(endpoint, verified):  # verified, and lately confirmed by the database
            return Delivery(verified)
        try:
            item = rows.pending(
                endpoint,
                verified,
                body,
                rows.stored_headers(endpoint, verified, headers),
                datetime.now(UTC),
                known=lambda name, digest: batch.known_body(rt, name, digest),
            )
            if item is not None:
                if tracing.ENABLED:  # the job continues the receive span's trace from its row
                    parent = tracing.traceparent()
                    for row in item.rows:
                        row["traceparent"] = parent
                # Shares one INSERT, COMMIT and Redis round trip with concurrent deliveries.
                with tracing.span("store", endpoint=endpoint.name, events=len(item.rows)) as traced:
                    done = committer.store(item)
                    traced.set("event_ids", done.new)
                    traced.set("outcome", "stored" if done.new else "duplicate")
                new, replayed = done.new, done.replayed
        except SQLAlchemyError as exc:
            # Down, failing over, pool exhausted: nothing was acknowledged, the provider retries.
            # A missing table or column is a schema never migrated or behind: say what to run.
            schema = revisions.problem_quietly(rt.engine) if revisions.missing_schema(exc) else None
            log.warning("store failed, answering 503: %s", schema or exc.__class__.__name__)
            raise UnavailableError("database unavailable", schema) from exc
    return Delivery(verified, new, replayed)


Answer = tuple[int, list[tuple[str, str]], bytes]


def _json(status: int, body: dict[str, str], *extra: tuple[str, str]) -> Answer:
    """What Flask's ``jsonify`` writes (compact, a newline), with ``extra`` headers."""
    data = json.dumps(body, separators=(",", ":")).encode() + b"\n"
    return status, [("Content-Type", "application/json"), ("Content-Length", str(len(data))), *extra], data


def handle(rt: Runtime, limits: RateLimits, endpoint_name: str, environ: dict[str, Any]) -> Answer:
    """One delivery to ``POST /webhooks/<endpoint_name>``, from its WSGI environ to its answer; with
    tracing on, in the ``receive`` span (``_account`` adds its outcome)."""
    if not tracing.ENABLED:
        return _handle(rt, limits, endpoint_name, environ)
    with tracing.span("receive", endpoint=endpoint_name) as traced:
        answer = _handle(rt, limits, endpoint_name, environ)
        traced.set("http_status", answer[0])
        return answer


def _handle(rt: Runtime, limits: RateLimits, endpoint_name: str, environ: dict[str, Any]) -> Answer:
    started = time.monotonic()
    label = metrics.endpoint_label(rt, endpoint_name)
    endpoint = rt.settings.endpoints.get(endpoint_name)
    forwarded = environ.get("HTTP_X_FORWARDED_FOR")
    who = clients.sender(environ.get("REMOTE_ADDR"), [forwarded] if forwarded else [], rt.settings.trusted_proxies)
    if endpoint is not None and (endpoint.rate_limit or endpoint.sender_rate_limit):
        # Before reading the body: a flood costs as little as possible. The sender's own budget
        # first, so one address's flood spends it, not the endpoint's.
        wait = limits.sender_retry_after(endpoint.name, who, endpoint.sender_rate_limit) or limits.retry_after(
            endpoint.name, endpoint.rate_limit
        )
        if wait:
            _account(label, started, "rejected", reason=Reason.RATE_LIMITED)
            return _json(429, {"error": Reason.RATE_LIMITED}, ("Retry-After", str(wait)))
    headers = environ_headers(environ)
    url = raw_url(environ)
    body = b""
    try:
        body = read_body(environ, rt.settings.max_body_bytes, rt.settings.read_timeout)
        method = environ.get("REQUEST_METHOD", "POST")
        delivery = deliver(rt, endpoint_name, headers, body, url, now=time.time(), sender=who, method=method)
    except VerificationError as exc:
        _account(label, started, "rejected", reason=exc.reason)
        kept = b"" if exc.reason in BODY_NOT_KEPT else body
        quarantine.record(rt, endpoint_name, exc, headers, kept, url)
        return _json(exc.status, {"error": exc.reason})
    except UnavailableError as exc:
        _account(label, started, "unavailable")
        said = {"detail": exc.detail} if exc.detail else {}
        return _json(503, {"error": "unavailable", **said}, ("Retry-After", "30"))
    except Exception:
        # A bug of ours, not the sender's: nothing was acknowledged, so the provider retries
        # (never a 500 page); the traceback goes to the log.
        log.exception("delivery to endpoint %r failed unexpectedly", endpoint_name)
        _account(label, started, "unavailable")
        return _json(503, {"error": "unavailable"}, ("Retry-After", "30"))
    verified = delivery.verified
    ids = [e.event_id for e in verified.events]
    _account(label, started, delivery.outcome, reason=Reason.REPLAYED_SIGNATURE if delivery.replayed else None, ids=ids)
    if verified.reply is not None:
        reply = verified.reply
        length = str(len(reply.body))
        return reply.status, [("Content-Type", reply.content_type), ("Content-Length", length)], reply.body
    return 200, [("Content-Type", "application/json"), ("Content-Length", str(len(RECEIVED)))], RECEIVED


class Front:
    """The app's WSGI entry: ``POST /webhooks/<name>`` is answered here, without Flask's request
    context, URL map and response objects (over a third of a delivery's CPU went to them);
    everything else (the console, health, other methods) goes on to Flask."""

    PREFIX = "/webhooks/"

    def __init__(self, app: Flask, rt: Runtime, limits: RateLimits) -> None:
        self.flask, self.rt, self.limits = app.wsgi_app, rt, limits

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path: str = environ.get("PATH_INFO", "")
        name = path[len(self.PREFIX) :]
        if not path.startswith(self.PREFIX) or not name or "/" in name or not self.answers(environ, name):
            return self.flask(environ, start_response)
        # WSGI carries the path's bytes as latin-1; the route matches the UTF-8 name (as Werkzeug does).
        name = name.encode("latin-1", "replace").decode("utf-8", "replace")
        status, headers, body = handle(self.rt, self.limits, name, environ)
        start_response(f"{status} {HTTP_STATUS_CODES.get(status, 'UNKNOWN').upper()}", headers)
        return [body]

    def answers(self, environ: dict[str, Any], name: str) -> bool:
        """A POST, or a GET to an endpoint whose kind ``answers_get`` (a handshake, never stored)."""
        method = environ.get("REQUEST_METHOD")
        if method != "GET":
            return method == "POST"
        endpoint = self.rt.settings.endpoints.get(name.encode("latin-1", "replace").decode("utf-8", "replace"))
        return endpoint is not None and providers.get(endpoint.kind).answers_get


@bp.post("/webhooks/<endpoint_name>")
def receive(endpoint_name: str) -> Response:
    """The same answer through Flask (``Front`` takes these requests first)."""
    status, headers, body = handle(
        current_app.extensions["webhooks"],
        current_app.extensions["webhooks_rate_limits"],
        endpoint_name,
        request.environ,
    )
    return Response(body, status=status, headers=headers)


def _account(
    endpoint: str, started: float, outcome: str, reason: str | None = None, ids: list[str] | None = None
) -> None:
    """Count the delivery and log its one line (never a body, a signature or a secret)."""
    metrics.child(metrics.DELIVERIES, endpoint, outcome).inc()
    if reason is not None:
        metrics.child(metrics.REJECTIONS, endpoint, reason).inc()
    if tracing.ENABLED:
        tracing.annotate(outcome=outcome, reason=reason, event_ids=ids)
    if not log.isEnabledFor(logging.INFO):  # the line's fields are built only for a line written
        return
    fields = {
        "endpoint": endpoint,
        "event_ids": ids or [],
        "outcome": outcome,
        "reason": reason,
        "latency_ms": round((time.monotonic() - started) * 1000, 1),
    }
    log.info("delivery %s", outcome, extra={"fields": fields})


def init_app(app: Flask) -> None:
    app.register_blueprint(bp)
    rt: Runtime = app.extensions["webhooks"]
    # Service-wide on a real Redis; per process on the embedded default (its fakeredis is this process's).
    shared = rt.queue.connection if rt.settings.redis_url else None
    limits = app.extensions["webhooks_rate_limits"] = RateLimits(shared, deployment=rt.settings.queue_name)
    app.wsgi_app = Front(app, rt, limits)  # type: ignore[method-assign]

    @app.errorhandler(VerificationError)
    def _verification(exc: VerificationError) -> tuple[Response, int]:
        return jsonify(error=exc.reason), exc.status

    @app.errorhandler(UnavailableError)
    def _unavailable(exc: UnavailableError) -> tuple[Response, int, dict[str, str]]:
        return jsonify(error="unavailable"), 503, {"Retry-After": "30"}
