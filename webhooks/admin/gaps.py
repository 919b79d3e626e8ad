"""Adyen payments with gaps (a modification but no AUTHORISATION): ``/admin/api/gaps`` and ``/admin/gaps``.

The fold (``providers.adyen.fold``) marks such a payment ``gap: true``; the list reads that flag
from the stored state, newest first, in keyset pages of ``(updated_at, endpoint, object_id)``.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, render_template, request
from sqlalchemy import select, true, tuple_

from webhooks.admin.auth import runtime
from webhooks.admin.queries import FilterError, iso
from webhooks.models import Object

PAGE_SIZE = 100


def _gaps() -> list[dict[str, Any]]:
    query = (
        select(Object)
        .where(Object.object_type == "payment", Object.state["gap"].as_boolean() == true())
        .order_by(Object.updated_at.desc(), Object.endpoint.desc(), Object.object_id.desc())
        .limit(PAGE_SIZE)
    )
    if request.args.get("endpoint"):
        query = query.where(Object.endpoint == request.args["endpoint"])
    before = request.args.get("before_id")
    if before:
        endpoint, _, object_id = before.partition("/")
        with runtime().sessions() as session:
            anchor = session.get(Object, (endpoint, "payment", object_id))
        if anchor is None:
            raise FilterError("bad_before")
        key = tuple_(Object.updated_at, Object.endpoint, Object.object_id)
        query = query.where(key < tuple_(anchor.updated_at, anchor.endpoint, anchor.object_id))
    with runtime().sessions() as session:
        rows = session.scalars(query).all()
        return [
            {"provider": r.endpoint, "endpoint": r.endpoint, "object_id": r.object_id, "updated_at": iso(r.updated_at),
             "status": r.state.get("status"), "applied": r.state.get("applied", []),
             "merchant_reference": r.state.get("merchantReference")}
            for r in rows
        ]


def list_gaps() -> Any:
    """Adyen payments whose AUTHORISATION has not arrived (``before_id``: ``endpoint/pspReference``)."""
    found = _gaps()
    after = f"{found[-1]['endpoint']}/{found[-1]['object_id']}" if len(found) == PAGE_SIZE else None
    return jsonify(gaps=found, next=after)


def gaps_page() -> str:
    return render_template("gaps.html", title="Payments with gaps", rows=_gaps(), page_size=PAGE_SIZE)


def init_app(api: Blueprint, pages: Blueprint) -> None:
    """Add the list to the admin API's blueprint and the page to the console's."""
    api.add_url_rule("/gaps", view_func=list_gaps, methods=["GET"])
    pages.add_url_rule("/gaps", view_func=gaps_page, methods=["GET"])
