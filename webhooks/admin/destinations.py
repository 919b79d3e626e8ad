"""The operator's side of forwarding: ``/admin/api/destinations`` (list, pause, resume; the held
deliveries of removed destinations: ``?removed=1``, adopt, fail), the console's
``/admin/destinations`` page, and an event's deliveries for its detail.

Every configured destination is listed, sent to or not, with its ``kind`` and ``target`` (the URL
with its credentials and query string redacted, ``webhooks.configuration.destinations.redacted``; ``url`` too for
an HTTP one, the same text: the guard refuses ``user:password@`` there); its secrets, a bus's
credentials and an HTTP URL's query never leave the configuration, the file's or the database's.
Creating, changing, deleting and rotating one is ``config_api.py``'s. A pause or resume is logged
with who did it and why; an adopt or a fail of held deliveries is also written to the ``replays``
audit table (``filter``: ``{"adopt": name}`` / ``{"fail": name}``).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from flask import Blueprint, jsonify, redirect, render_template, request, url_for
from sqlalchemy import select
from sqlalchemy.orm import Session
from werkzeug.wrappers import Response

from webhooks import tracing
from webhooks.admin import config_json
from webhooks.admin.auth import runtime, who
from webhooks.admin.queries import iso, storable
from webhooks.configuration.destinations import Destination
from webhooks.forward import deliveries
from webhooks.forward.backlog import Backlog, Held, backlogs, held
from webhooks.forward.dispatcher import nudge
from webhooks.forward.held import adopt, fail_held
from webhooks.store.configuration import items as store
from webhooks.store.sql import audit_record
from webhooks.tables.events import COUNT_CAP
from webhooks.tables.forwarding import Delivery, DeliveryAttempt

log = logging.getLogger(__name__)
MAX_REASON = 500  # characters of an operator's reason (pause, adopt, fail)
BAD_REASON = f"A reason is text of at most {MAX_REASON} characters that can be stored."


def destination_json(destination: Destination, backlog: Backlog) -> dict[str, Any]:
    shown = {"url": destination.target} if destination.kind == "http" else {}  # redacted too
    return {
        "name": destination.name,
        "kind": destination.kind,
        "target": destination.target,
        **shown,
        "state": backlog.state,
        "pending": backlog.pending,
        "failed": backlog.failed,
        "oldest_pending_seconds": backlog.oldest_pending_seconds,
        "last_success_at": iso(backlog.last_success_at),
        "last_error": backlog.last_error,
        "ordered": destination.ordered,
        "events": list(destination.events),
        "filter": dict(destination.filter.source) if destination.filter is not None else None,
        "throttled_until": iso(backlog.throttled_until),
        "paused_reason": backlog.paused_reason,
    }


def _listed() -> list[dict[str, Any]]:
    """Every destination of the snapshot with its backlog, and where it is defined (``source``,
    ``label``, ``secrets``: ``config_json.destination_extra``)."""
    configured = runtime().settings.destinations
    with runtime().sessions() as session:
        found = backlogs(session, list(configured), datetime.now(UTC))
        stored = store.items(session, "destination")
        extra = config_json.destination_extra(runtime(), stored, store.secrets_of(session, [i.name for i in stored]))
    return [{**destination_json(configured[b.name], b), **extra.get(b.name, {})} for b in found]


def held_json(h: Held) -> dict[str, Any]:
    return {"name": h.name, "pending": h.pending, "oldest_pending_at": iso(h.oldest_pending_at)}


def _held() -> list[dict[str, Any]]:
    with runtime().sessions() as session:
        return [held_json(h) for h in held(session, runtime().settings.destinations)]


def deliveries_of(session: Session, endpoint: str, event_id: str) -> list[dict[str, Any]]:
    """The event's deliveries, by destination, each with every attempt (``history``, oldest first)."""
    key = (Delivery.endpoint == endpoint, Delivery.event_id == event_id)
    rows = session.scalars(select(Delivery).where(*key).order_by(Delivery.destination)).all()
    attempts = session.scalars(
        select(DeliveryAttempt)
        .where(DeliveryAttempt.endpoint == endpoint, DeliveryAttempt.event_id == event_id)
        .order_by(DeliveryAttempt.destination, DeliveryAttempt.id)
    ).all()
    history: dict[str, list[dict[str, Any]]] = {}
    traces = {d.destination: tracing.trace_id(d.traceparent) for d in rows}  # each attempt continued it
    for a in attempts:
        history.setdefault(a.destination, []).append(
            {
                "number": a.number,
                "started_at": iso(a.started_at),
                "seconds": a.seconds,
                "outcome": a.outcome,
                "status_code": a.status_code,
                "error": a.error,
                "response": a.response,
                "trace_id": traces.get(a.destination),
            }
        )
    return [
        {
            "destination": d.destination,
            "status": d.status,
            "attempts": d.attempts,
            "last_status_code": d.last_status_code,
            "last_error": d.last_error,
            "delivered_at": iso(d.delivered_at),
            "next_attempt_at": iso(d.next_attempt_at) if d.status == deliveries.PENDING else None,
            "forced": d.forced,
            "trace_id": traces[d.destination],
            "history": history.get(d.destination, []),
        }
        for d in rows
    ]


def _reason(reason: Any) -> str | None:
    """An operator's reason as stored (None: none given); raises ValueError for anything but text of
    at most ``MAX_REASON`` characters a database can hold."""
    if reason is not None and (not isinstance(reason, str) or len(reason) > MAX_REASON):
        raise ValueError("bad_reason")
    text = (reason.strip() or None) if reason else None
    if text is not None and not storable(text):
        raise ValueError("bad_reason")
    return text


def _pause(name: str, paused: bool, reason: Any) -> str | None:
    """Pause or resume ``name``; the error code when it cannot be (``not_found``, ``bad_reason``)."""
    if name not in runtime().settings.destinations:
        return "not_found"
    try:
        text = _reason(reason)
    except ValueError:
        return "bad_reason"
    deliveries.pause(runtime().sessions, name, paused, text)
    log.warning("destination %s %s by %s: %s", name, "paused" if paused else "resumed", who(), text or "(no reason)")
    return None


def _settle_held(name: str, verb: str, reason: Any) -> tuple[int | None, str | None]:
    """Adopt (``verb`` "adopt") or fail the deliveries held under ``name``, audited; how many, or the
    error code (``not_configured``: nothing to adopt them; ``bad_reason``)."""
    configured = runtime().settings.destinations
    if verb == "adopt" and name not in configured:
        return None, "not_configured"
    try:
        text = _reason(reason)
    except ValueError:
        return None, "bad_reason"
    now = datetime.now(UTC)
    with runtime().sessions.begin() as session:
        move = adopt if verb == "adopt" else fail_held
        keys = move(session, name, configured, now)
        if keys:
            audit_record(session, {"who": who(), "reason": text or "", "filter": {verb: name}}, keys, now)
    if keys:  # ``name`` is then a stored destination's: the log never repeats a URL's text as such
        log.warning("held deliveries of %s: %d %s by %s: %s", name, len(keys), verb, who(), text or "(no reason)")
        if verb == "adopt":
            nudge()
    return len(keys), None


# ----- the API ---------------------------------------------------------------------------------
def list_destinations() -> Any:
    """Every configured destination with its state and backlog; ``?removed=1``: the names whose
    deliveries are held (removed, or configured again at another URL)."""
    if request.args.get("removed") == "1":
        return jsonify(destinations=_held())
    return jsonify(destinations=_listed())


def _api_settle_held(name: str, verb: str) -> Any:
    body = request.get_json(silent=True)
    count, error = _settle_held(name, verb, body.get("reason") if isinstance(body, dict) else None)
    if error is not None:
        return jsonify(error=error), 409 if error == "not_configured" else 400
    return jsonify({"adopted" if verb == "adopt" else "failed": count})


def adopt_destination(name: str) -> Any:
    return _api_settle_held(name, "adopt")


def fail_destination(name: str) -> Any:
    return _api_settle_held(name, "fail")


def _api_pause(name: str, paused: bool) -> Any:
    body = request.get_json(silent=True)
    error = _pause(name, paused, body.get("reason") if isinstance(body, dict) else None)
    if error is not None:
        return jsonify(error=error), 404 if error == "not_found" else 400
    [shown] = [d for d in _listed() if d["name"] == name]
    return jsonify(shown)


def pause_destination(name: str) -> Any:
    return _api_pause(name, True)


def resume_destination(name: str) -> Any:
    return _api_pause(name, False)


# ----- the console -----------------------------------------------------------------------------
def destinations_page() -> str:
    return render_template(
        "destinations.html",
        title="Destinations",
        rows=_listed(),
        removed=_held(),
        done=request.args.get("done"),
        cap=COUNT_CAP,
    )


def _page_settle_held(name: str, verb: str) -> Response | tuple[str, int]:
    count, error = _settle_held(name, verb, request.form.get("reason"))
    if error is not None:
        message = (
            f"No destination is configured under {name}: configure one, then adopt."
            if error == "not_configured"
            else BAD_REASON
        )
        status = 409 if error == "not_configured" else 400
        return render_template("message.html", title="Not changed", message=message), status
    done = f"{name}: {count} held {'adopted' if verb == 'adopt' else 'failed'}"
    return redirect(url_for("admin_pages.destinations_page", done=done), 303)


def adopt_page(name: str) -> Response | tuple[str, int]:
    return _page_settle_held(name, "adopt")


def fail_page(name: str) -> Response | tuple[str, int]:
    return _page_settle_held(name, "fail")


def _page_pause(name: str, paused: bool) -> Response | tuple[str, int]:
    error = _pause(name, paused, request.form.get("reason"))
    if error is not None:
        message = "No such destination." if error == "not_found" else BAD_REASON
        return render_template(
            "message.html", title="Not changed", message=message
        ), 404 if error == "not_found" else 400
    return redirect(url_for("admin_pages.destinations_page", done=f"{name} {'paused' if paused else 'resumed'}"), 303)


def pause_page(name: str) -> Response | tuple[str, int]:
    return _page_pause(name, True)


def resume_page(name: str) -> Response | tuple[str, int]:
    return _page_pause(name, False)


def init_app(api: Blueprint, pages: Blueprint) -> None:
    """Add the routes to the admin API's blueprint and the pages to the console's."""
    api.add_url_rule("/destinations", view_func=list_destinations, methods=["GET"])
    api.add_url_rule("/destinations/<name>/pause", view_func=pause_destination, methods=["POST"])
    api.add_url_rule("/destinations/<name>/resume", view_func=resume_destination, methods=["POST"])
    api.add_url_rule("/destinations/<name>/adopt", view_func=adopt_destination, methods=["POST"])
    api.add_url_rule("/destinations/<name>/fail", view_func=fail_destination, methods=["POST"])
    pages.add_url_rule("/destinations", view_func=destinations_page, methods=["GET"])
    pages.add_url_rule("/destinations/<name>/pause", view_func=pause_page, methods=["POST"])
    pages.add_url_rule("/destinations/<name>/resume", view_func=resume_page, methods=["POST"])
    pages.add_url_rule("/destinations/<name>/adopt", view_func=adopt_page, methods=["POST"])
    pages.add_url_rule("/destinations/<name>/fail", view_func=fail_page, methods=["POST"])
