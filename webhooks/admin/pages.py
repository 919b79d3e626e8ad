"""The console's HTML pages under ``/admin``: events, dead letter, detail, replay, audit.

Server-rendered with autoescaped Jinja templates and no script at all; every POST carries a CSRF
token (``csrf.py``). The events page runs two queries whatever the table size: the capped status
counts and one keyset page.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any
from urllib.parse import quote

from flask import Blueprint, abort, current_app, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from webhooks.admin import csrf, queries
from webhooks.admin.auth import check_auth
from webhooks.admin.queries import FilterError, Filters
from webhooks.admin.replay import BULK_LIMIT, ReplayError, matching_count, replay_matching, replay_one
from webhooks.models import STATUSES, Event
from webhooks.runtime import Runtime

bp = Blueprint("admin_pages", __name__, url_prefix="/admin", template_folder="templates",
               static_folder="static", static_url_path="/static")
bp.before_request(check_auth)
WHO = "admin"
PAGE_SIZE = 50
# No inline script or style, nothing from elsewhere; forms post only here; never framed.
CSP = ("default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
       "frame-ancestors 'none'; base-uri 'none'")


@bp.before_request
def _csrf_on_posts() -> tuple[str, int] | None:
    if request.method == "POST" and not csrf.valid():
        return render_template("message.html", title="Refused",
                               message="This form has expired or came from another site (CSRF check failed). "
                                       "Reload the page and try again."), 403
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
    text = queries.iso(value) or ""
    return text.replace("T", " ")[:19] + ("Z" if text else "")


@bp.app_template_filter("pretty")
def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)


@bp.context_processor
def _context() -> dict[str, Any]:
    return {"csrf_token": csrf.token, "csrf_field": csrf.FIELD, "statuses": STATUSES, "link": _link}


def _rt() -> Runtime:
    rt: Runtime = current_app.extensions["webhooks"]
    return rt


def _filters() -> Filters:
    try:
        return queries.parse_filters(request.args)
    except FilterError as exc:
        abort(400, exc.reason)


def _link(filters: dict[str, str], **extra: str) -> str:
    """A query string for the events page (filters plus ``extra``)."""
    items = {**filters, **{k: v for k, v in extra.items() if v}}
    return "?" + "&".join(f"{quote(k)}={quote(v, safe='')}" for k, v in items.items()) if items else "?"


@bp.get("/")
def events() -> str:
    return _events_page(_filters(), title="Events")


@bp.get("/dead")
def dead_letter() -> str:
    return _events_page(dataclasses.replace(_filters(), status="failed"), title="Dead letter")


def _events_page(filters: Filters, title: str) -> str:
    rt = _rt()
    cursor = request.args.get("cursor") or None
    refresh = request.args.get("refresh") == "1"
    with rt.sessions() as session:
        try:
            counts = queries.status_counts(session, filters)
            found, next_cursor = queries.page(session, filters, limit=PAGE_SIZE, cursor=cursor,
                                              providers=rt.settings.endpoints)
        except FilterError as exc:
            abort(400, exc.reason)
        return render_template(
            "events.html", title=title, events=found, counts=counts, cap=queries.COUNT_CAP,
            filters=filters, shown=filters.as_dict(), next_cursor=next_cursor, cursor=cursor,
            refresh=refresh, endpoints=sorted(rt.settings.endpoints), dead=title == "Dead letter",
        )


@bp.get("/events/<provider>/<path:event_id>")
def event(provider: str, event_id: str) -> Any:
    rt = _rt()
    with rt.sessions() as session:
        found = session.get(Event, (provider, event_id))
        if found is None:
            abort(404)
        if request.args.get("format") == "raw":
            # The exact signed bytes, as a download: never rendered, never sniffed.
            filename = hashlib.sha256(f"{provider}/{event_id}".encode()).hexdigest()[:16] + ".bin"
            return Response(found.payload, content_type="application/octet-stream",
                            headers={"Content-Disposition": f'attachment; filename="{filename}"'})
        obj, moved = queries.object_history(session, found)
        endpoint = rt.settings.endpoints.get(provider)
        return render_template(
            "event.html", title=f"{provider} {event_id}", event=found, obj=obj, moved=moved,
            attempts=queries.attempts(session, provider, event_id), payload=_payload(found),
            sha256=hashlib.sha256(found.payload).hexdigest(), skew=queries.skew_seconds(found),
            secrets_configured=len(endpoint.secrets) if endpoint else None,
            replayed=request.args.get("replayed") == "1",
        )


def _payload(event: Event) -> dict[str, Any]:
    """The body as text, pretty JSON when it parses, and the event's own item in a batch."""
    text = event.payload.decode("utf-8", errors="replace")
    try:
        parsed = json.loads(event.payload)
    except ValueError:
        return {"text": text, "pretty": None, "item": None}
    item = None
    if event.item_index is not None and event.kind == "adyen":
        try:
            item = parsed["notificationItems"][event.item_index]["NotificationRequestItem"]
        except (KeyError, IndexError, TypeError):
            item = None
    return {"text": text, "pretty": parsed, "item": item}


@bp.post("/events/<provider>/<path:event_id>/replay")
def replay_event(provider: str, event_id: str) -> Any:
    reason = request.form.get("reason", "").strip()
    if not reason:
        return render_template("message.html", title="Reason required",
                               message="Say why you replay this event; it goes to the audit log."), 400
    try:
        replay_one(_rt(), provider, event_id, who=WHO, reason=reason)
    except ReplayError as exc:
        message = {"in_progress": "It is being processed right now; try again in a moment."}.get(exc.reason, exc.reason)
        return render_template("message.html", title="Not replayed", message=message), exc.status
    return redirect(url_for(".event", provider=provider, event_id=event_id, replayed="1"), 303)


@bp.get("/replay")
def replay_form() -> str:
    """The bulk replay's dry run: how many events the filter matches now, then confirm."""
    filters = _filters()
    return render_template("replay.html", title="Replay events", filters=filters, shown=filters.as_dict(),
                           count=matching_count(_rt(), filters), limit=BULK_LIMIT, error=None)


@bp.post("/replay")
def replay_bulk() -> Any:
    try:
        filters = queries.parse_filters(request.form)
    except FilterError as exc:
        abort(400, exc.reason)
    try:
        outcome = replay_matching(_rt(), filters, who=WHO, reason=request.form.get("reason"), dry_run=False)
    except ReplayError as exc:
        errors = {"reason_required": "A reason is required.", "filter_required": "Choose a filter first.",
                  "too_many": f"More than {BULK_LIMIT} events match: narrow the filter."}
        return render_template("replay.html", title="Replay events", filters=filters, shown=filters.as_dict(),
                               count=matching_count(_rt(), filters), limit=BULK_LIMIT,
                               error=errors.get(exc.reason, exc.reason)), exc.status
    return redirect(url_for(".audit", done=outcome.replay_id), 303)


@bp.get("/audit")
def audit() -> str:
    before = request.args.get("before")
    with _rt().sessions() as session:
        entries = queries.replays(session, before=int(before) if before and before.isdigit() else None)
        return render_template("audit.html", title="Replay audit", entries=entries,
                               done=request.args.get("done"))
