"""``POST /admin/api/destinations/<name>/filter-test`` (#42): whether a destination would take an
event, and if not the first thing that refuses it, without sending anything. The event is a stored
one (``{"event": {"endpoint", "event_id"}}``, read as handlers see it) or a sample (``{"body",
"headers", "type", "endpoint", "object_type", "object_id"}``). The answer: ``{"destination",
"matches", "why"}``, ``why`` naming the ``events`` glob or the filter's first refusing clause,
under the destination's configuration as it is now."""

from __future__ import annotations

import json
from typing import Any

from flask import Blueprint, jsonify, redirect, render_template, request, url_for

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


def init_app(api: Blueprint, pages: Blueprint) -> None:
    api.add_url_rule("/destinations/<name>/filter-test", view_func=filter_test, methods=["POST"])
    pages.add_url_rule("/destinations/<name>/filter-test", view_func=filter_test_page, methods=["POST"])


def _text(value: Any, required: bool = True) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
        raise ValueError
    return value


class Unanswered(Exception):
    """A test that cannot be answered: ``reason`` (``not_found``, ``bad_event``), ``detail``, ``status``."""

    def __init__(self, reason: str, detail: str, status: int) -> None:
        super().__init__(detail)
        self.reason, self.detail, self.status = reason, detail, status


BAD = "endpoint, event_id and type are strings of 1 to 255 characters"


def decide(name: str, asked: Any) -> dict[str, Any]:
    """``{"destination", "matches", "why"}`` for ``asked`` (a stored event's reference or a sample),
    under destination ``name`` as configured now; raises ``Unanswered``."""
    rt = runtime()
    destination = rt.settings.destinations.get(name)
    if destination is None:
        raise Unanswered("not_found", f"no destination {name!r}", 404)
    if not isinstance(asked, dict):
        raise Unanswered("bad_event", '{"event": {"endpoint", "event_id"}} or a sample {"body", ...}', 400)
    try:
        if "event" in asked:
            ref = asked["event"] if isinstance(asked["event"], dict) else {}
            endpoint, event_id = _text(ref.get("endpoint")), _text(ref.get("event_id"))
            with rt.sessions() as session:
                row = session.get(Event, (endpoint, event_id))
                if row is None:
                    raise Unanswered("not_found", "no such event", 404)
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
        raise Unanswered("bad_event", BAD, 400) from None
    why = refusal(destination, seen)
    return {"destination": name, "matches": why is None, "why": why}


def filter_test(name: str) -> Any:
    try:
        return jsonify(decide(name, request.get_json(silent=True)))
    except Unanswered as exc:
        return jsonify(error=exc.reason, detail=exc.detail), exc.status


def _sample(form: Any) -> dict[str, Any]:
    """The console form as the API's request: a stored event when an event id is given, else a sample
    (a JSON body, ``Name: value`` header lines)."""
    if form.get("event_id"):
        return {"event": {"endpoint": form.get("endpoint"), "event_id": form.get("event_id")}}
    try:
        body = json.loads(form.get("body") or "null")
    except ValueError:
        raise Unanswered("bad_event", "the sample body is not JSON", 400) from None
    lines = (line.partition(":") for line in (form.get("headers") or "").splitlines() if line.strip())
    headers = {k.strip(): v.strip() for k, _, v in lines}
    return {"type": form.get("type"), "endpoint": form.get("endpoint"), "body": body, "headers": headers}


def filter_test_page(name: str) -> Any:
    """The console's tester, on the destinations page: the answer shown there, nothing sent."""
    try:
        answer = decide(name, _sample(request.form))
    except Unanswered as exc:
        return render_template("message.html", title="Not tested", message=f"{exc.detail}."), exc.status
    if answer["matches"]:
        said = f"{name} takes it (nothing was sent)"
    else:
        said = f"{name} refuses it: {answer['why']} (nothing was sent)"
    return redirect(url_for("admin_pages.destinations_page", done=said), 303)
