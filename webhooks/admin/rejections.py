"""Admin API for refused deliveries: ``/admin/api/rejections`` (list, detail, re-verify)."""

from __future__ import annotations

from typing import Any

from flask import jsonify, request
from sqlalchemy import select

from webhooks import quarantine
from webhooks.admin.api import _error, _rt, bp
from webhooks.admin.queries import iso
from webhooks.errors import UnavailableError, VerificationError
from webhooks.models import Rejection, RejectionCount


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


@bp.get("/rejections")
def list_rejections() -> Any:
    query = select(Rejection).order_by(Rejection.id.desc())
    for name in ("endpoint", "reason"):
        if request.args.get(name):
            query = query.where(getattr(Rejection, name) == request.args[name])
    try:
        limit = min(max(int(request.args.get("limit", 50)), 1), 1000)
    except ValueError:
        return _error("bad_limit", 400)
    with _rt().sessions() as session:
        rows = session.scalars(query.limit(limit)).all()
        counts: dict[str, dict[str, int]] = {}
        for c in session.scalars(select(RejectionCount)):
            counts.setdefault(c.endpoint, {})[c.reason] = c.count
        return jsonify(rejections=[summary(r) for r in rows], counts=counts)


@bp.get("/rejections/<int:rejection_id>")
def show_rejection(rejection_id: int) -> Any:
    with _rt().sessions() as session:
        row = session.get(Rejection, rejection_id)
        if row is None:
            return _error("not_found", 404)
        headers = {k: v for k, v in row.headers.items() if k != quarantine.AUTH_MARK}
        body = row.body.decode("utf-8", errors="replace")
        return jsonify(summary(row) | {"url": row.url, "headers": headers, "body": body})


@bp.post("/rejections/<int:rejection_id>/reverify")
def reverify(rejection_id: int) -> Any:
    try:
        row, result = quarantine.reverify(_rt(), rejection_id)
    except UnavailableError:
        return jsonify(error="unavailable"), 503, {"Retry-After": "30"}
    if row is None:
        return _error("not_found", 404)
    if isinstance(result, VerificationError):
        return jsonify(id=rejection_id, status="rejected", error=result.reason), 422
    return jsonify(id=rejection_id, status="stored", events=[e.event_id for e in result.events])
