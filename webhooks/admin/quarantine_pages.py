"""Console pages for refused deliveries: ``/admin/rejections`` (list with counts, detail, re-verify)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, abort, redirect, render_template, request, url_for

from webhooks.admin.auth import runtime
from webhooks.admin.queries import rejections_query
from webhooks.errors import VerificationError
from webhooks.receiver import quarantine
from webhooks.receiver.receive import accept
from webhooks.tables.events import Rejection

PAGE_SIZE = 100
COUNTS_PAGE = 100  # endpoints per page of counts: old databases may hold thousands


def rejections() -> str:
    shown = {name: request.args[name] for name in ("endpoint", "reason") if request.args.get(name)}
    query = rejections_query(request.args, request.args.get("before") or None).limit(PAGE_SIZE)
    counts_after = request.args.get("counts_after", "")
    with runtime().sessions() as session:
        rows = session.scalars(query).all()
        counts, counts_next = quarantine.count_page(session, counts_after, COUNTS_PAGE)
        return render_template(
            "rejections.html",
            title="Rejected requests",
            rows=rows,
            counts=counts,
            counts_next=counts_next,
            counts_after=counts_after,
            unknown=quarantine.UNKNOWN,
            shown=shown,
            page_size=PAGE_SIZE,
        )


def rejection(rejection_id: int) -> str:
    with runtime().sessions() as session:
        row = session.get(Rejection, rejection_id)
        if row is None:
            abort(404)
        return render_template(
            "rejection.html",
            title=f"Rejected request #{row.id}",
            row=row,
            headers=quarantine.shown_headers(runtime(), row),
            body=row.body.decode("utf-8", errors="replace"),
            result=request.args.get("result"),
        )


def reverify(rejection_id: int) -> Any:
    row, result = quarantine.reverify(runtime(), rejection_id, accept)
    if row is None:
        abort(404)
    outcome = f"rejected: {result.reason}" if isinstance(result, VerificationError) else "stored"
    return redirect(url_for(".rejection", rejection_id=rejection_id, result=outcome), 303)


def init_app(bp: Blueprint) -> None:
    """Add the pages to the console's blueprint (``/admin``)."""
    bp.add_url_rule("/rejections", view_func=rejections, methods=["GET"])
    bp.add_url_rule("/rejections/<int:rejection_id>", view_func=rejection, methods=["GET"])
    bp.add_url_rule("/rejections/<int:rejection_id>/reverify", view_func=reverify, methods=["POST"])
