"""The operator's side of forwarding: ``/admin/api/destinations`` (list, pause, resume), the
console's ``/admin/destinations`` page, and an event's deliveries for its detail.

Every configured destination is listed, sent to or not; its secrets never leave the
configuration (a URL holds none: the guard refuses ``user:password@`` at start-up). A pause or
resume is logged with who did it and why (the ``replays`` audit table holds replays only).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from flask import Blueprint, jsonify, redirect, render_template, request, url_for
from sqlalchemy import select
from sqlalchemy.orm import Session
from werkzeug.wrappers import Response

from webhooks.admin.auth import WHO, runtime
from webhooks.admin.queries import iso, storable
from webhooks.forward.backlog import Backlog, backlogs
from webhooks.forward.destinations import Destination
from webhooks.models import COUNT_CAP, Delivery, DeliveryAttempt
from webhooks.store import deliveries

log = logging.getLogger(__name__)


def destination_json(destination: Destination, backlog: Backlog) -> dict[str, Any]:
    return {
        "name": destination.name,
        "url": destination.url,
        "state": backlog.state,
        "pending": backlog.pending,
        "failed": backlog.failed,
        "oldest_pending_seconds": backlog.oldest_pending_seconds,
        "last_success_at": iso(backlog.last_success_at),
        "last_error": backlog.last_error,
        "ordered": destination.ordered,
        "throttled_until": iso(backlog.throttled_until),
        "paused_reason": backlog.paused_reason,
    }


def _listed() -> list[dict[str, Any]]:
    configured = runtime().settings.destinations
    with runtime().sessions() as session:
        found = backlogs(session, list(configured), datetime.now(UTC))
    return [destination_json(configured[b.name], b) for b in found]


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
            "history": history.get(d.destination, []),
        }
        for d in rows
    ]


def _pause(name: str, paused: bool, reason: Any) -> str | None:
    """Pause or resume ``name``; the error code when it cannot be (``not_found``, ``bad_reason``)."""
    if name not in runtime().settings.destinations:
        return "not_found"
    text = str(reason).strip() if reason else None
    if text is not None and not storable(text):
        return "bad_reason"
    deliveries.pause(runtime().sessions, name, paused, text)
    log.warning("destination %s %s by %s: %s", name, "paused" if paused else "resumed", WHO, text or "(no reason)")
    return None


# ----- the API ---------------------------------------------------------------------------------
def list_destinations() -> Any:
    """Every configured destination with its state and backlog."""
    return jsonify(destinations=_listed())


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
        "destinations.html", title="Destinations", rows=_listed(), done=request.args.get("done"), cap=COUNT_CAP
    )


def _page_pause(name: str, paused: bool) -> Response | tuple[str, int]:
    error = _pause(name, paused, request.form.get("reason"))
    if error is not None:
        message = (
            "No such destination." if error == "not_found" else "The reason holds a character that cannot be stored."
        )
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
    pages.add_url_rule("/destinations", view_func=destinations_page, methods=["GET"])
    pages.add_url_rule("/destinations/<name>/pause", view_func=pause_page, methods=["POST"])
    pages.add_url_rule("/destinations/<name>/resume", view_func=resume_page, methods=["POST"])
