"""``POST /admin/api/destinations/<name>/filter-test`` (#42): whether a destination would take an
event, and if not the first thing that refuses it, without sending anything. The event is a stored
one (``{"event": {"endpoint", "event_id"}}``, read as handlers see it) or a sample (``{"body",
"headers", "type", "endpoint", "object_type", "object_id"}``). The answer: ``{"destination",
"matches", "why"}``, ``why`` naming the ``events`` glob or the filter's first refusing clause,
under the destination's configuration as it is now."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, request

from webhooks.admin.auth import runtime
from webhooks.configuration import filters
from webhooks.forward.filtering import refusal, stored_view
from webhooks.tables.events import Event

MAX_TEXT = 255


def routing(rt: Any, session: Any, event: Event) -> list[dict[str, Any]]:
    """For each destination ``event``'s endpoint forwards to, whether it takes the event and, if not,
    the first thing that refuses it, recomputed under the configuration as it is now (the event
    page's account: ``recomputed`` says so; what happened at processing time is its deliveries)."""
    names = [n for n in rt.settings.forwards.get(event.endpoint, ()) if n in rt.settings.destinations]
    if not names:
        return []
    seen = stored_view(session, event)
    out = []
    for name in names:
        why = refusal(rt.settings.destinations[name], seen)
        out.append({"destination": name, "matches": why is None, "why": why, "recomputed": True})
    return out


def init_app(api: Blueprint) -> None:
    api.add_url_rule("/destinations/<name>/filter-test", view_func=filter_test, methods=["POST"])


def _text(value: Any, required: bool = True) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
        raise ValueError
    return value


def filter_test(name: str) -> Any:
    rt = runtime()
    destination = rt.settings.destinations.get(name)
    if destination is None:
        return jsonify(error="not_found", detail=f"no destination {name!r}"), 404
    asked = request.get_json(silent=True)
    if not isinstance(asked, dict):
        return jsonify(error="bad_event", detail='{"event": {"endpoint", "event_id"}} or a sample {"body", ...}'), 400
    try:
        if "event" in asked:
            ref = asked["event"] if isinstance(asked["event"], dict) else {}
            endpoint, event_id = _text(ref.get("endpoint")), _text(ref.get("event_id"))
            with rt.sessions() as session:
                row = session.get(Event, (endpoint, event_id))
                if row is None:
                    return jsonify(error="not_found", detail="no such event"), 404
                seen = stored_view(session, row)
        else:
            raw = asked.get("headers") or {}
            if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
                raise ValueError
            event_type, endpoint = _text(asked.get("type")), _text(asked.get("endpoint"))
            object_type, object_id = _text(asked.get("object_type"), False), _text(asked.get("object_id"), False)
            assert event_type is not None and endpoint is not None
            seen = filters.view(asked.get("body"), raw, event_type, endpoint, object_type, object_id)
    except (ValueError, KeyError):
        return jsonify(error="bad_event", detail="endpoint, event_id and type are strings of 1 to 255 characters"), 400
    why = refusal(destination, seen)
    return jsonify(destination=name, matches=why is None, why=why)
