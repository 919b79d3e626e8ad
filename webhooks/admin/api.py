"""The admin JSON API under ``/admin/api``: the console's pages as JSON.

Every POST, PATCH and DELETE must be ``Content-Type: application/json``: a cross-site HTML form
or a "simple" ``fetch`` cannot send that type, and the browser's cached Basic credentials would
otherwise ride along — this is the API's CSRF protection (the HTML pages use tokens, ``csrf.py``).
Named tokens (``Authorization: Bearer``) are accepted here only (``auth.check_api_auth``).
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, g, jsonify, request
from werkzeug.wrappers import Response

from webhooks import tracing
from webhooks.admin import csrf, errors, queries
from webhooks.admin.auth import check_api_auth, runtime, who
from webhooks.admin.destinations import deliveries_of
from webhooks.admin.filter_test import routing
from webhooks.admin.queries import FilterError, iso
from webhooks.admin.replay import PENDING, ReplayError, replay_matching, replay_one
from webhooks.tables.events import Attempt, Event, Object, Replay
from webhooks.vocabulary import DeliveryStatus, Status

bp = Blueprint("admin_api", __name__, url_prefix="/admin/api")
JSON_TYPES = ("application/json",)  # PATCH also takes application/merge-patch+json (RFC 7396)
bp.before_request(check_api_auth)
errors.init(bp, errors.api_answer)
errors.init_api(bp)


@bp.before_request
def _json_posts_only() -> Response | tuple[Response, int] | None:
    """The API's CSRF guard, on every POST, PATCH and DELETE. Browsers mark cross-site requests
    (``Origin``, ``Sec-Fetch-Site``): those are refused. A body must be JSON, which no cross-site
    form or simple request can send; a bodiless POST (``curl -X POST``) is fine from a client
    that is not a cross-site page."""
    if not csrf.changes_state(request.method):
        return None
    # The origin rule exists because a browser attaches cached Basic credentials by itself. It
    # never attaches a Bearer token by itself, and a cross-site page can make it send an
    # ``Authorization`` header only after a CORS preflight, which we never grant (no
    # Access-Control-Allow-* header is ever sent). A request whose valid token got it this far
    # was sent by a client holding the token, not by a page riding on a browser: not judged.
    if not g.get("admin_token") and not csrf.same_origin():
        return _error("cross_site_request", 403)
    request.max_content_length = runtime().settings.max_body_bytes  # a larger body: 413 as it is read
    allowed = JSON_TYPES if request.method != "PATCH" else (*JSON_TYPES, "application/merge-patch+json")
    if (request.content_length or request.headers.get("Transfer-Encoding")) and request.mimetype not in allowed:
        return _error("json_required", 415)
    return None


@bp.before_request
def _usable_input() -> tuple[Response, int] | None:
    """Query values and URL keys no database could compare answer 400 / 404, never a 500."""
    queries.check_args(request.args.items(multi=True))
    if not queries.keys_fit((request.view_args or {}).values()):
        return _error("not_found", 404)
    return None


def _event_id() -> str:
    """The ``id`` of the query-string form of the event routes (for ids a path cannot carry:
    ``.``, ``..``, a leading ``/``)."""
    event_id = request.args.get("id")
    if event_id is None:
        raise ReplayError("id_required", 400)
    return event_id


def summary(event: Event) -> dict[str, Any]:
    return {
        "provider": event.endpoint,  # the API's first name for the endpoint, kept
        "endpoint": event.endpoint,
        "event_id": event.event_id,
        "type": event.event_type,
        "status": event.status,
        "attempts": event.attempts,
        "received_at": iso(event.received_at),
        "processed_at": iso(event.processed_at),
        "last_error": event.last_error,
    }


def detail(event: Event, delivery: queries.Received) -> dict[str, Any]:
    return summary(event) | {
        "kind": event.kind,
        "payload": delivery.body.decode("utf-8", errors="replace"),
        "headers": delivery.headers,
        "object_type": event.object_type,
        "object_id": event.object_id,
        "object_version": event.object_version,
        "reference": event.reference,
        "item_index": event.item_index,
        "scheme": event.scheme,
        "secret_index": event.secret_index,
        "secret_id": event.secret_id,
        "signed_at": event.signed_at,
        "skew_seconds": queries.skew_seconds(event),
        "last_traceback": event.last_traceback,
        "trace_id": tracing.trace_id(event.traceparent),
    }


def attempt_json(attempt: Attempt, trace_id: str | None = None) -> dict[str, Any]:
    """One attempt; ``trace_id``: its event's (``detail``), which every attempt's job continued."""
    return {
        "number": attempt.number,
        "status": attempt.status,
        "started_at": iso(attempt.started_at),
        "finished_at": iso(attempt.finished_at),
        "error": attempt.error,
        "traceback": attempt.traceback,
        "handlers": attempt.handlers,
        "trace_id": trace_id,
    }


def object_json(obj: Object) -> dict[str, Any]:
    return {
        "version": obj.version,
        "state": obj.state,
        "last_event_id": obj.last_event_id,
        "updated_at": iso(obj.updated_at),
    }


def replay_json(entry: Replay) -> dict[str, Any]:
    return {
        "id": entry.id,
        "at": iso(entry.at),
        "who": entry.who,
        "reason": entry.reason,
        "filter": entry.filter,
        "count": entry.count,
        "event_ids": entry.event_ids,
    }


def _error(reason: str, status: int, detail: str | None = None) -> tuple[Response, int]:
    return (jsonify(error=reason, detail=detail) if detail else jsonify(error=reason)), status


@bp.errorhandler(FilterError)
def _bad_filter(exc: FilterError) -> tuple[Response, int]:
    return _error(exc.reason, 400)


@bp.errorhandler(ReplayError)
def _bad_replay(exc: ReplayError) -> tuple[Response, int]:
    return _error(exc.reason, exc.status, exc.detail)


@bp.get("/events")
def list_events() -> Any:
    """Newest first; filters ``provider``/``endpoint``, ``status``, ``type``, ``since``, ``until``,
    ``q``; ``cursor`` from the previous page's ``next_cursor``."""
    filters = queries.parse_filters(request.args)
    limit = queries.parse_limit(request.args.get("limit"))
    rt = runtime()
    with rt.sessions() as session:
        events, cursor = queries.page(
            session, filters, limit=limit, cursor=request.args.get("cursor") or None, endpoints=rt.settings.endpoints
        )
        return jsonify(events=[summary(e) for e in events], next_cursor=cursor)


@bp.get("/counts")
def counts() -> Any:
    """Events per status for ``provider``/``endpoint``, ``since``, ``until`` (capped, see ``cap``)."""
    filters = queries.parse_filters(request.args)
    with runtime().sessions() as session:
        return jsonify(counts=queries.status_counts(session, filters), cap=queries.COUNT_CAP)


# Route variables keep the name ``provider`` for the endpoint's name: ``url_for`` takes ``endpoint``.
@bp.get("/events/<provider>", endpoint="show_event_by_query")
def _show_event_by_query(provider: str) -> Any:
    return show_event(provider, _event_id())


@bp.get("/events/<provider>/<path:event_id>", merge_slashes=False)
def show_event(provider: str, event_id: str) -> Any:
    if not queries.storable(event_id):
        return _error("not_found", 404)
    with runtime().sessions() as session:
        event = session.get(Event, (provider, event_id))
        if event is None:
            return _error("not_found", 404)
        obj, moved = queries.object_history(session, event)
        return jsonify(
            detail(event, queries.received(session, event))
            | {
                "attempt_log": [
                    attempt_json(a, tracing.trace_id(event.traceparent))
                    for a in queries.attempts(session, provider, event_id)
                ],
                "object": object_json(obj) if obj else None,
                "object_events": [summary(e) | {"object_version": e.object_version} for e in moved],
                "deliveries": deliveries_of(session, provider, event_id),
                "routing": routing(runtime(), session, event),
            }
        )


@bp.get("/objects/<provider>/<object_type>/<path:object_id>", merge_slashes=False)
def show_object(provider: str, object_type: str, object_id: str) -> Any:
    with runtime().sessions() as session:
        obj = session.get(Object, (provider, object_type, object_id))
        if obj is None:
            return _error("not_found", 404)
        return jsonify(object_json(obj))


def _body() -> dict[str, Any]:
    body = request.get_json(silent=True)
    return body if isinstance(body, dict) else {}


@bp.post("/events/<provider>/replay", endpoint="replay_event_by_query")
def _replay_event_by_query(provider: str) -> Any:
    return replay_event(provider, _event_id())


@bp.post("/events/<provider>/<path:event_id>/replay", merge_slashes=False)
def replay_event(provider: str, event_id: str) -> Any:
    """Process the event again; with ``destination``, send its delivery there again instead."""
    body = _body()
    reason, destination, force = body.get("reason"), body.get("destination"), body.get("force") is True
    outcome = replay_one(
        runtime(),
        provider,
        event_id,
        who=who(),
        reason=str(reason) if reason else None,
        destination=destination,
        force=force,
    )
    if destination is not None:
        answer = {"provider": provider, "endpoint": provider, "event_id": event_id, "destination": destination}
        return jsonify(answer | {"status": DeliveryStatus.PENDING, "replay_id": outcome.replay_id}), 202
    status = Status.QUEUED if outcome.queued else Status.RECEIVED
    return jsonify(
        provider=provider,
        endpoint=provider,
        event_id=event_id,
        status=status,
        replay_id=outcome.replay_id,
        **_queued(outcome.queued),
    ), 202


def _queued(queued: bool) -> dict[str, Any]:
    """``queued``, and when Redis refused, what happens next."""
    if queued:
        return {"queued": True}
    return {"queued": False, "detail": PENDING}


@bp.post("/events/replay")
def replay_bulk() -> Any:
    """Bulk replay by filter: ``{"provider"|"endpoint", "status", "type", "since", "until", "q",
    "reason", "dry_run", "destination"}`` → ``{"count", "dry_run", "event_ids"}``."""
    body = _body()
    filters = queries.parse_filters(body)
    reason, destination = body.get("reason"), body.get("destination")
    outcome = replay_matching(
        runtime(),
        filters,
        who=who(),
        reason=str(reason) if reason else None,
        dry_run=bool(body.get("dry_run")),
        destination=destination,
        force=body.get("force") is True,
    )
    answer: dict[str, Any] = {"count": outcome.count, "dry_run": outcome.dry_run, "filter": filters.as_dict()}
    if destination is not None:
        answer["filter"] |= {"destination": destination}
        if not outcome.dry_run:
            answer |= {"event_ids": [list(pair) for pair in outcome.event_ids], "replay_id": outcome.replay_id}
            answer["refused"] = [{"endpoint": e, "event_id": i, "why": why} for (e, i), why in outcome.refused.items()]
    elif not outcome.dry_run:
        answer |= {
            "event_ids": [list(pair) for pair in outcome.event_ids],
            "replay_id": outcome.replay_id,
            **_queued(outcome.queued),
        }
    return jsonify(answer), 200 if outcome.dry_run else 202


@bp.get("/replays")
def list_replays() -> Any:
    """The replay audit log, newest first; ``before`` (an id) pages back."""
    before_id = queries.parse_id(request.args.get("before"))
    with runtime().sessions() as session:
        return jsonify(replays=[replay_json(r) for r in queries.replays(session, before=before_id)])
