"""Admin API for refused deliveries: ``/admin/api/rejections`` (list, detail, re-verify)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, request

from webhooks.admin.api import _error
from webhooks.admin.auth import runtime
from webhooks.admin.queries import iso, parse_limit, rejections_query
from webhooks.errors import UnavailableError, VerificationError
from webhooks.receiver import quarantine
from webhooks.receiver.receive import accept
from webhooks.tables.events import Rejection

COUNTS_PAGE = 100  # endpoints per page of counts


def summary(row: Rejection) -> dict[str, Any]:
    return {
        "id": row.id,
        "endpoint": row.endpoint,
        "kind": row.kind,
        "reason": row.reason,
        "detail": row.detail,
        "http_status": row.http_status,
        "received_at": iso(row.received_at),
        "outcome": row.outcome,
        "reverified_at": iso(row.reverified_at),
    }


def list_rejections() -> Any:
    """Newest rejections (``before``: older than that id) and one page of counts, by endpoint
    name (``counts_after``: the previous page's ``counts_next``). Limits read as on every paged
    route (``parse_limit``: empty is the default, out of range is clamped)."""
    limit = parse_limit(request.args.get("limit"))
    counts_limit = parse_limit(request.args.get("counts_limit"), COUNTS_PAGE)
    query = rejections_query(request.args, request.args.get("before"))
    with runtime().sessions() as session:
        rows = session.scalars(query.limit(limit)).all()
        page, counts_next = quarantine.count_page(session, request.args.get("counts_after", ""), counts_limit)
        counts: dict[str, dict[str, int]] = {}
        for c in page:
            counts.setdefault(c.endpoint, {})[c.reason] = c.count
        return jsonify(rejections=[summary(r) for r in rows], counts=counts, counts_next=counts_next)


def show_rejection(rejection_id: int) -> Any:
    with runtime().sessions() as session:
        row = session.get(Rejection, rejection_id)
        if row is None:
            return _error("not_found", 404)
        body = row.body.decode("utf-8", errors="replace")
        headers = quarantine.shown_headers(runtime(), row)
        return jsonify(summary(row) | {"url": row.url, "headers": headers, "body": body})


def reverify(rejection_id: int) -> Any:
    try:
        row, result = quarantine.reverify(runtime(), rejection_id, accept)
    except UnavailableError:
        return jsonify(error="unavailable"), 503, {"Retry-After": "30"}
    if row is None:
        return _error("not_found", 404)
    if isinstance(result, VerificationError):
        return jsonify(id=rejection_id, status="rejected", error=result.reason), 422
    return jsonify(id=rejection_id, status="stored", events=[e.event_id for e in result.events])


def init_app(bp: Blueprint) -> None:
    """Add the routes to the admin API's blueprint (``/admin/api``)."""
    bp.add_url_rule("/rejections", view_func=list_rejections, methods=["GET"])
    bp.add_url_rule("/rejections/<int:rejection_id>", view_func=show_rejection, methods=["GET"])
    bp.add_url_rule("/rejections/<int:rejection_id>/reverify", view_func=reverify, methods=["POST"])
