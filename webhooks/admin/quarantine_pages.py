"""Console pages for refused deliveries: ``/admin/rejections`` (list with counts, detail, re-verify)."""

from __future__ import annotations

from typing import Any

from flask import abort, redirect, render_template, request, url_for
from sqlalchemy import select

from webhooks import quarantine
from webhooks.admin.pages import _rt, bp
from webhooks.admin.queries import FilterError
from webhooks.errors import VerificationError
from webhooks.models import Rejection

PAGE_SIZE = 100
COUNTS_PAGE = 100  # endpoints per page of counts: old databases may hold thousands


@bp.get("/rejections")
def rejections() -> str:
    query = select(Rejection).order_by(Rejection.id.desc()).limit(PAGE_SIZE)
    shown = {name: request.args[name] for name in ("endpoint", "reason") if request.args.get(name)}
    for name, value in shown.items():
        query = query.where(getattr(Rejection, name) == value)
    before = request.args.get("before", "")
    if before:
        if not (before.isascii() and before.isdigit() and len(before) <= 18):
            raise FilterError("bad_before")
        query = query.where(Rejection.id < int(before))
    counts_after = request.args.get("counts_after", "")
    with _rt().sessions() as session:
        rows = session.scalars(query).all()
        counts, counts_next = quarantine.count_page(session, counts_after, COUNTS_PAGE)
        return render_template("rejections.html", title="Rejected requests", rows=rows, counts=counts,
                               counts_next=counts_next, counts_after=counts_after, unknown=quarantine.UNKNOWN,
                               shown=shown, page_size=PAGE_SIZE)


@bp.get("/rejections/<int:rejection_id>")
def rejection(rejection_id: int) -> str:
    with _rt().sessions() as session:
        row = session.get(Rejection, rejection_id)
        if row is None:
            abort(404)
        return render_template("rejection.html", title=f"Rejected request #{row.id}", row=row,
                               headers=quarantine.shown_headers(_rt(), row),
                               body=row.body.decode("utf-8", errors="replace"), result=request.args.get("result"))


@bp.post("/rejections/<int:rejection_id>/reverify")
def reverify(rejection_id: int) -> Any:
    row, result = quarantine.reverify(_rt(), rejection_id)
    if row is None:
        abort(404)
    outcome = f"rejected: {result.reason}" if isinstance(result, VerificationError) else "stored"
    return redirect(url_for(".rejection", rejection_id=rejection_id, result=outcome), 303)
