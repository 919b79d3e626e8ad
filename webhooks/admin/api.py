"""The admin JSON API under ``/admin/api``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from flask import Blueprint, current_app, jsonify, request
from sqlalchemy import select
from werkzeug.wrappers import Response

from webhooks.admin.auth import check_auth
from webhooks.models import STATUSES, Event, Object
from webhooks.runtime import Runtime

bp = Blueprint("admin_api", __name__, url_prefix="/admin/api")
bp.before_request(check_auth)


def _rt() -> Runtime:
    rt: Runtime = current_app.extensions["webhooks"]
    return rt


def iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:  # SQLite hands back naive UTC
        value = value.replace(tzinfo=UTC)
    return value.isoformat().replace("+00:00", "Z")


def summary(event: Event) -> dict[str, Any]:
    return {
        "provider": event.provider,
        "event_id": event.event_id,
        "type": event.event_type,
        "status": event.status,
        "attempts": event.attempts,
        "received_at": iso(event.received_at),
        "processed_at": iso(event.processed_at),
        "last_error": event.last_error,
    }


def detail(event: Event) -> dict[str, Any]:
    return summary(event) | {
        "kind": event.kind,
        "payload": event.payload.decode("utf-8", errors="replace"),
        "headers": event.headers,
        "object_type": event.object_type,
        "object_id": event.object_id,
        "object_version": event.object_version,
        "item_index": event.item_index,
        "scheme": event.scheme,
        "secret_index": event.secret_index,
        "signed_at": event.signed_at,
        "last_traceback": event.last_traceback,
    }


def _error(reason: str, status: int) -> tuple[Response, int]:
    return jsonify(error=reason), status


@bp.get("/events")
def list_events() -> Any:
    query = select(Event).order_by(Event.received_at.desc(), Event.event_id.desc())
    args = request.args
    if args.get("provider"):
        query = query.where(Event.provider == args["provider"])
    if args.get("status"):
        if args["status"] not in STATUSES:
            return _error("bad_status", 400)
        query = query.where(Event.status == args["status"])
    if args.get("type"):
        query = query.where(Event.event_type == args["type"])
    try:
        limit = min(max(int(args.get("limit", 50)), 1), 1000)
    except ValueError:
        return _error("bad_limit", 400)
    with _rt().sessions() as session:
        events = session.scalars(query.limit(limit)).all()
        return jsonify(events=[summary(e) for e in events])


@bp.get("/events/<provider>/<path:event_id>")
def show_event(provider: str, event_id: str) -> Any:
    with _rt().sessions() as session:
        event = session.get(Event, (provider, event_id))
        if event is None:
            return _error("not_found", 404)
        return jsonify(detail(event))


@bp.get("/objects/<provider>/<object_type>/<path:object_id>")
def show_object(provider: str, object_type: str, object_id: str) -> Any:
    with _rt().sessions() as session:
        obj = session.get(Object, (provider, object_type, object_id))
        if obj is None:
            return _error("not_found", 404)
        return jsonify(version=obj.version, state=obj.state, last_event_id=obj.last_event_id,
                       updated_at=iso(obj.updated_at))


@bp.post("/events/<provider>/<path:event_id>/replay")
def replay_event(provider: str, event_id: str) -> Any:
    rt = _rt()
    with rt.sessions.begin() as session:
        event = session.get(Event, (provider, event_id), with_for_update=True)
        if event is None:
            return _error("not_found", 404)
        if event.status == "processing":
            return _error("in_progress", 409)
        event.status, event.status_at = "queued", datetime.now(UTC)
    rt.queue.requeue(provider, event_id)
    return jsonify(provider=provider, event_id=event_id, status="queued"), 202
