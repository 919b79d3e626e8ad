"""Objects with gaps (an event missing before the others: an Adyen payment with a modification but
no AUTHORISATION): ``/admin/api/gaps`` and ``/admin/gaps``.

A kind that has gaps says so (``Provider.gap_type``: the object type its fold marks ``gap: true``);
the list asks each configured endpoint's kind, reads that flag from the stored state of that type
only, newest first, in keyset pages of ``(updated_at, endpoint, object_id)``, through the partial
index of gap objects (``ix_objects_gaps``): its cost follows the gaps, not the objects.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, render_template, request
from sqlalchemy import Select, and_, or_, select, text, true, tuple_

from webhooks import providers
from webhooks.admin.auth import runtime
from webhooks.admin.queries import FilterError, iso
from webhooks.tables.events import GAP_WHERE, Object

PAGE_SIZE = 100


def _gap_types() -> dict[str, str]:
    """Configured endpoint → the object type its kind marks with gaps (kinds without gaps left out)."""
    endpoints = runtime().settings.endpoints.items()
    found = {name: providers.get(e.kind).gap_type for name, e in endpoints}
    return {name: kind_type for name, kind_type in found.items() if kind_type is not None}


def gaps_query(types: dict[str, str], anchor: Object | None, dialect: str) -> Select[Object]:
    """A page of gap objects of ``types`` (endpoint → object type) older than ``anchor``. On
    PostgreSQL and SQLite the gap test is ``ix_objects_gaps``' own predicate, so only the gap rows
    are read (a few among millions of objects); elsewhere the JSON value is compared."""
    typed = or_(*(and_(Object.endpoint == name, Object.object_type == kind_type) for name, kind_type in types.items()))
    marked = text(GAP_WHERE[dialect]) if dialect in GAP_WHERE else Object.state["gap"].as_boolean() == true()
    query = (
        select(Object)
        .where(typed, marked)
        .order_by(Object.updated_at.desc(), Object.endpoint.desc(), Object.object_id.desc())
        .limit(PAGE_SIZE)
    )
    if anchor is not None:
        key = tuple_(Object.updated_at, Object.endpoint, Object.object_id)
        query = query.where(key < tuple_(anchor.updated_at, anchor.endpoint, anchor.object_id))
    return query


def _gaps() -> list[dict[str, Any]]:
    types = _gap_types()
    if request.args.get("endpoint"):
        types = {k: v for k, v in types.items() if k == request.args["endpoint"]}
    anchor = None
    before = request.args.get("before_id")
    if before:
        endpoint, _, object_id = before.partition("/")
        with runtime().sessions() as session:
            anchor = session.get(Object, (endpoint, types.get(endpoint, ""), object_id))
        if anchor is None:
            raise FilterError("bad_before")
    if not types:
        return []
    with runtime().sessions() as session:
        rows = session.scalars(gaps_query(types, anchor, session.get_bind().dialect.name)).all()
        return [
            {
                "provider": r.endpoint,
                "endpoint": r.endpoint,
                "object_id": r.object_id,
                "updated_at": iso(r.updated_at),
                "status": r.state.get("status"),
                "applied": r.state.get("applied", []),
                "merchant_reference": r.state.get("merchantReference"),
            }
            for r in rows
        ]


def list_gaps() -> Any:
    """Objects with gaps, e.g. Adyen payments whose AUTHORISATION has not arrived (``before_id``:
    ``endpoint/object_id``, e.g. the pspReference)."""
    found = _gaps()
    after = f"{found[-1]['endpoint']}/{found[-1]['object_id']}" if len(found) == PAGE_SIZE else None
    return jsonify(gaps=found, next=after)


def gaps_page() -> str:
    return render_template("gaps.html", title="Payments with gaps", rows=_gaps(), page_size=PAGE_SIZE)


def init_app(api: Blueprint, pages: Blueprint) -> None:
    """Add the list to the admin API's blueprint and the page to the console's."""
    api.add_url_rule("/gaps", view_func=list_gaps, methods=["GET"])
    pages.add_url_rule("/gaps", view_func=gaps_page, methods=["GET"])
