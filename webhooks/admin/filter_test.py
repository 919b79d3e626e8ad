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
from webhooks.forward.filtering import stored_headers
from webhooks.providers import PROVIDERS
from webhooks.tables.events import Event

MAX_TEXT = 255


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
                provider = PROVIDERS[row.kind]
                data = provider.event_data(row.payload, None if row.body_digest is not None else row.item_index)
                headers = stored_headers(session, row.endpoint, row.event_id)
                seen = filters.view(data, headers, row.event_type, row.endpoint, row.object_type, row.object_id)
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
    why = None
    if not destination.wants(seen["type"]):
        why = f"type {seen['type']!r} is not in events {list(destination.events)}"
    elif destination.filter is not None:
        why = destination.filter.why_not(seen)
    return jsonify(destination=name, matches=why is None, why=why)
