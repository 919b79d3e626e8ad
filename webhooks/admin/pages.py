"""The console's HTML pages under ``/admin``: events, dead letter, detail, replay, audit.

Server-rendered with autoescaped Jinja templates and no script at all; every POST carries a CSRF
token (``csrf.py``). The events page runs two queries whatever the table size: the capped status
counts and one keyset page.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode

from flask import Blueprint, abort, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from webhooks import providers
from webhooks.admin import amounts, csrf, errors, overview, queries, versions
from webhooks.admin.auth import check_auth, runtime, who
from webhooks.admin.destinations import deliveries_of
from webhooks.admin.filter_test import routing
from webhooks.admin.queries import FilterError, Filters
from webhooks.admin.replay import BULK_LIMIT, ReplayError, matching_count, replay_matching, replay_one
from webhooks.tables.events import STATUSES, Attempt, Event, Object, Replay
from webhooks.timestamps import aware
from webhooks.vocabulary import Status

bp = Blueprint(
    "admin_pages",
    __name__,
    url_prefix="/admin",
    template_folder="templates",
    static_folder="static",
    static_url_path="/static",
)
bp.before_request(check_auth)
errors.init(bp, errors.page_answer)
PAGE_SIZE = 50
REJECTED_WINDOW = timedelta(hours=24)  # "recent" rejections on the events page
# No inline script or style, nothing from elsewhere; forms post only here; never framed.
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)


@bp.before_request
def _usable_input() -> None:
    """Query values and URL keys no database could compare answer 400 / 404, never a 500."""
    queries.check_args(request.args.items(multi=True))
    if not queries.keys_fit((request.view_args or {}).values()):
        abort(404)


# The 400 page's words for each reason code (the JSON API answers the code itself).
REASONS = {
    "bad_time": "since and until take an ISO 8601 time in the years 1 to 9999, UTC unless it has an offset "
    "(2024-01-31T00:00:00Z).",
    "bad_cursor": "This page link is damaged or out of date: start again from the newest events.",
    "bad_before": "before takes a row number (digits 0-9, at most 2^63 - 1).",
    "bad_status": "status takes one of: " + ", ".join(STATUSES) + ".",
    "bad_limit": "limit takes a number.",
    "bad_reason": "The reason holds a character that cannot be stored (NUL or an unpaired surrogate).",
}


@bp.errorhandler(FilterError)
def _bad_filter(exc: FilterError) -> tuple[str, int]:
    text = REASONS.get(
        exc.reason, "A parameter holds a character that cannot be stored (NUL or an unpaired surrogate)."
    )
    return render_template("message.html", title="Bad request", message=f"{text} ({exc.reason})"), 400


@bp.before_request
def _csrf_on_posts() -> tuple[str, int] | None:
    if csrf.changes_state(request.method) and not csrf.valid():
        return render_template(
            "message.html",
            title="Refused",
            message="This form has expired or came from another site (CSRF check failed). "
            "Reload the page and try again.",
        ), 403
    return None


@bp.after_request
def _headers(response: Response) -> Response:
    response.headers.setdefault("Content-Security-Policy", CSP)
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["Cache-Control"] = "no-store"
    return csrf.set_cookie(response)


@bp.app_template_filter("when")
def _when(value: Any) -> str:
    """A time to the second; a datetime, or the API's ISO text of one."""
    text = value if isinstance(value, str) else queries.iso(value) or ""
    return text.replace("T", " ")[:19] + ("Z" if text else "")


@bp.app_template_filter("counted")
def _counted(count: int, noun: str) -> str:
    """``1 attempt``, ``2 attempts``, ``0 attempts``: a count with its noun (regular plurals)."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


@bp.app_template_filter("pretty")
def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)


@bp.context_processor
def _context() -> dict[str, Any]:
    return {
        "csrf_token": csrf.token,
        "csrf_field": csrf.FIELD,
        "statuses": STATUSES,
        "link": _link,
        "event_url": event_url,
        "version_text": versions.describe,
        "unix_time": versions.unix_time,
    }


def _filters() -> Filters:
    return queries.parse_filters(request.args)


def _path_safe(event_id: str) -> bool:
    """Whether ``event_id`` survives as one quoted path segment: browsers resolve ``.`` and ``..``
    segments (even written ``%2E``), and servers and proxies decode ``%2F`` into a slash."""
    return "/" not in event_id and event_id not in ("", ".", "..")


def event_url(endpoint: str, event_id: str, replay: bool = False, **query: str) -> str:
    """The console URL of one event, exact whatever its id: ``/admin/events/<endpoint>/<id>``
    (each quoted whole), or ``/admin/events/<endpoint>?id=<id>`` for an id that a path would not
    carry unchanged. ``replay`` gives the replay form's action instead."""
    base = url_for("admin_pages.events") + "events/" + quote(endpoint, safe="")
    if _path_safe(event_id):
        base += "/" + quote(event_id, safe="")
    else:
        query = {"id": event_id, **query}
    base += "/replay" if replay else ""
    items = {k: v for k, v in query.items() if v}
    return base + ("?" + urlencode(items, quote_via=quote, safe="") if items else "")


def _event_id() -> str:
    """The ``id`` of the query-string form of the event routes."""
    event_id = request.args.get("id")
    if event_id is None:
        abort(404)
    return event_id


def _link(filters: dict[str, str], **extra: str) -> str:
    """A query string for the events page (filters plus ``extra``)."""
    items = {**filters, **{k: v for k, v in extra.items() if v}}
    return "?" + "&".join(f"{quote(k)}={quote(v, safe='')}" for k, v in items.items()) if items else "?"


@bp.get("/")
def events() -> str:
    return _events_page(_filters(), title="Events")


@bp.get("/dead")
def dead_letter() -> str:
    return _events_page(dataclasses.replace(_filters(), status=Status.FAILED), title="Dead letter")


def _events_page(filters: Filters, title: str) -> str:
    rt = runtime()
    cursor = request.args.get("cursor") or None
    refresh = request.args.get("refresh") == "1"
    with rt.sessions() as session:
        # The rejections kept from the last day, counted in the same query as the statuses.
        counts = queries.status_counts(session, filters, rejected_since=datetime.now(UTC) - REJECTED_WINDOW)
        found, next_cursor = queries.page(
            session, filters, limit=PAGE_SIZE, cursor=cursor, endpoints=rt.settings.endpoints
        )
        rejected = counts.pop(queries.REJECTED, 0)
        return render_template(
            "events.html",
            title=title,
            events=found,
            counts=counts,
            cap=queries.COUNT_CAP,
            amounts={(e.endpoint, e.event_id): amounts.of(e) for e in found},
            rejected=rejected,
            filters=filters,
            shown=filters.as_dict(),
            next_cursor=next_cursor,
            cursor=cursor,
            refresh=refresh,
            endpoints=sorted(rt.settings.endpoints),
            dead=title == "Dead letter",
        )


# Route variables keep the name ``provider`` for the endpoint's name: ``url_for`` takes ``endpoint``.
@bp.get("/events/<provider>", endpoint="event_by_query")
def _event_by_query(provider: str) -> Any:
    return event(provider, _event_id())


@bp.get("/events/<provider>/<path:event_id>", merge_slashes=False)
def event(provider: str, event_id: str) -> Any:
    if not queries.storable(event_id):
        abort(404)
    rt = runtime()
    with rt.sessions() as session:
        found = session.get(Event, (provider, event_id))
        if found is None:
            abort(404)
        delivery = queries.received(session, found)
        if request.args.get("format") == "raw":
            # The exact signed bytes, as a download: never rendered, never sniffed.
            filename = hashlib.sha256(f"{provider}/{event_id}".encode()).hexdigest()[:16] + ".bin"
            return Response(
                delivery.body,
                content_type="application/octet-stream",
                headers={"Content-Disposition": f'attachment; filename="{filename}"'},
            )
        obj, moved = queries.object_history(session, found)
        endpoint = rt.settings.endpoints.get(provider)
        attempts = queries.attempts(session, provider, event_id)
        replays = queries.replays_of(session, found)
        return render_template(
            "event.html",
            title=f"{provider} {event_id}",
            event=found,
            obj=obj,
            moved=moved,
            superseded=_superseded(found, obj),
            attempts=attempts,
            replays=replays,
            since_replay=_since(attempts, replays),
            payload=_payload(found, delivery.body),
            headers=delivery.headers,
            size=len(delivery.body),
            sha256=hashlib.sha256(delivery.body).hexdigest(),
            skew=queries.skew_seconds(found),
            secrets_configured=len(endpoint.secrets) if endpoint else None,
            replayed=request.args.get("replayed"),
            deliveries=deliveries_of(session, provider, event_id),
            routing=routing(rt, session, found),
            resent=request.args.get("resent"),
        )


def _superseded(event: Event, obj: Object | None) -> bool:
    """Whether a newer version of the event's object than the event's own was applied since."""
    return (
        obj is not None
        and obj.last_event_id != event.event_id
        and event.object_version is not None
        and obj.version > event.object_version
    )


@bp.get("/overview")
def overview_page() -> str:
    """Per endpoint: received, rejected and processing outcomes over the last hour and day."""
    rt = runtime()
    with rt.sessions() as session:
        found = overview.build(session, rt.settings.endpoints, datetime.now(UTC))
    return render_template(
        "overview.html",
        title="Overview",
        overview=found,
        bars=overview.bars,
        chart_w=overview.CHART_W,
        chart_h=overview.CHART_H,
    )


def _since(attempts: list[Attempt], replays: list[Replay]) -> int:
    """How many attempts started after the latest replay (all of them when there was none)."""
    if not replays:
        return len(attempts)
    last = aware(replays[0].at)
    return sum(1 for a in attempts if aware(a.started_at) >= last)


def _payload(event: Event, body: bytes) -> dict[str, Any]:
    """The delivery's body as text, pretty JSON when it parses, and the event's own item in a batch."""
    text = body.decode("utf-8", errors="replace")
    try:
        parsed = json.loads(body)
    except ValueError:
        return {"text": text, "pretty": None, "item": None}
    item = None
    kind = providers.PROVIDERS.get(event.kind)
    if event.body_digest is not None and body is not event.payload:
        item = json.loads(event.payload)  # the item's own row
    elif event.item_index is not None and kind is not None:
        item = kind.batch_item(parsed, event.item_index)
    return {"text": text, "pretty": parsed, "item": item}


@bp.post("/events/<provider>/replay", endpoint="replay_event_by_query")
def _replay_event_by_query(provider: str) -> Any:
    return replay_event(provider, _event_id())


@bp.post("/events/<provider>/<path:event_id>/replay", merge_slashes=False)
def replay_event(provider: str, event_id: str) -> Any:
    reason = request.form.get("reason", "").strip()
    if not reason:
        return render_template(
            "message.html", title="Reason required", message="Say why you replay this event; it goes to the audit log."
        ), 400
    destination = request.form.get("destination") or None  # a Re-send button: that delivery again
    force = request.form.get("force") == "1"
    try:
        outcome = replay_one(
            runtime(), provider, event_id, who=who(), reason=reason, destination=destination, force=force
        )
    except ReplayError as exc:
        message = {
            "in_progress": "It is being processed, or sent, right now; try again in a moment.",
            "not_processed": "It has not been processed, so there is nothing to send yet.",
            "unknown_destination": "No such destination is configured.",
            "bad_reason": REASONS["bad_reason"],
            "filtered": f"{exc.detail}.",
        }.get(exc.reason, exc.reason)
        return render_template("message.html", title="Not replayed", message=message), exc.status
    if destination is not None:
        return redirect(event_url(provider, event_id, resent=destination), 303)
    return redirect(event_url(provider, event_id, replayed="1" if outcome.queued else "pending"), 303)


@bp.get("/replay")
def replay_form() -> str:
    """The bulk replay's dry run: how many events the filter matches now, then confirm."""
    filters = _filters()
    return render_template(
        "replay.html",
        title="Replay events",
        filters=filters,
        shown=filters.as_dict(),
        count=matching_count(runtime(), filters),
        limit=BULK_LIMIT,
        error=None,
    )


@bp.post("/replay")
def replay_bulk() -> Any:
    filters = queries.parse_filters(request.form)
    try:
        outcome = replay_matching(runtime(), filters, who=who(), reason=request.form.get("reason"), dry_run=False)
    except ReplayError as exc:
        errors = {
            "reason_required": "A reason is required.",
            "filter_required": "Choose a filter first.",
            "too_many": f"More than {BULK_LIMIT} events match: narrow the filter.",
            "bad_reason": REASONS["bad_reason"],
        }
        return render_template(
            "replay.html",
            title="Replay events",
            filters=filters,
            shown=filters.as_dict(),
            count=matching_count(runtime(), filters),
            limit=BULK_LIMIT,
            error=errors.get(exc.reason, exc.reason),
        ), exc.status
    return redirect(url_for(".audit", done=outcome.replay_id, pending=None if outcome.queued else "1"), 303)


@bp.get("/audit")
def audit() -> str:
    before = queries.parse_id(request.args.get("before"))
    with runtime().sessions() as session:
        entries = queries.replays(session, before=before)
        return render_template(
            "audit.html",
            title="Replay audit",
            entries=entries,
            done=request.args.get("done"),
            pending=request.args.get("pending") == "1",
        )
