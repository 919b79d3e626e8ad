"""Console pages for refused deliveries: ``/admin/rejections`` (list with counts, detail, re-verify)."""

from __future__ import annotations

from typing import Any

from flask import abort, redirect, render_template, request, url_for
from sqlalchemy import select

from webhooks import quarantine
from webhooks.admin.pages import _rt, bp
from webhooks.errors import VerificationError
from webhooks.models import Rejection, RejectionCount

PAGE_SIZE = 100


@bp.get("/rejections")
def rejections() -> str:
    query = select(Rejection).order_by(Rejection.id.desc()).limit(PAGE_SIZE)
    shown = {name: request.args[name] for name in ("endpoint", "reason") if request.args.get(name)}
    for name, value in shown.items():
        query = query.where(getattr(Rejection, name) == value)
    before = request.args.get("before", "")
    if before.isdigit():
        query = query.where(Rejection.id < int(before))
    with _rt().sessions() as session:
        rows = session.scalars(query).all()
        counts = session.scalars(select(RejectionCount).order_by(RejectionCount.endpoint, RejectionCount.reason)).all()
        return render_template("rejections.html", title="Rejected requests", rows=rows, counts=counts,
                               shown=shown, page_size=PAGE_SIZE)


@bp.get("/rejections/<int:rejection_id>")
def rejection(rejection_id: int) -> str:
    with _rt().sessions() as session:
        row = session.get(Rejection, rejection_id)
        if row is None:
            abort(404)
        headers = {k: v for k, v in row.headers.items() if k != quarantine.AUTH_MARK}
        return render_template("rejection.html", title=f"Rejected request #{row.id}", row=row, headers=headers,
                               body=row.body.decode("utf-8", errors="replace"), result=request.args.get("result"))


@bp.post("/rejections/<int:rejection_id>/reverify")
def reverify(rejection_id: int) -> Any:
    row, result = quarantine.reverify(_rt(), rejection_id)
    if row is None:
        abort(404)
    outcome = f"rejected: {result.reason}" if isinstance(result, VerificationError) else "stored"
    return redirect(url_for(".rejection", rejection_id=rejection_id, result=outcome), 303)
