"""The console's pages of runtime configuration (#32): ``/admin/endpoints``, every endpoint (the
file's read-only, the database's with links to edit and delete) with the URL to register with its
provider, and ``/admin/changes``, the audit of every configuration change.

Both list what the admin API lists (``config_json``), so a secret is only ever a fingerprint. The
Endpoints page is the one console page that runs a script: one file from ``/admin/static``
(``script-src 'self'``) that shows a copy button beside each URL; without it the URL is text to
select.
"""

from __future__ import annotations

from datetime import UTC, datetime

from flask import Blueprint, render_template, request
from werkzeug.wrappers import Response

from webhooks.admin import config_json, csrf, queries
from webhooks.admin.auth import runtime
from webhooks.admin.pages import CSP
from webhooks.configuration.live import ENDPOINT
from webhooks.store.configuration import items as store

CHANGES_PAGE = 50
COPY_CSP = CSP.replace("default-src 'none';", "default-src 'none'; script-src 'self';")


def endpoints_page() -> Response:
    rt = runtime()
    with rt.deferred_sessions() as session:
        stored, sealed = store.items(session, ENDPOINT), store.secrets_of(session)
    rows = config_json.endpoints(rt, stored, sealed)
    site = f"{csrf.scheme()}://{request.host}"
    for row in rows:
        row["full_url"] = site + row["url"]
    now = queries.iso(datetime.now(UTC))  # the listed times' format: a lapsed secret compares before it
    page = render_template("endpoints.html", title="Endpoints", rows=rows, done=request.args.get("done"), now=now)
    return Response(page, mimetype="text/html", headers={"Content-Security-Policy": COPY_CSP})


def changes_page() -> str:
    before = queries.parse_id(request.args.get("before"))
    with runtime().deferred_sessions() as session:
        rows = [config_json.change_json(c) for c in store.changes(session, before=before, limit=CHANGES_PAGE)]
    older = rows[-1]["id"] if len(rows) == CHANGES_PAGE else None
    return render_template("changes.html", title="Configuration changes", rows=rows, older=older)


def init_app(pages: Blueprint) -> None:
    """Add the pages to the console's blueprint."""
    pages.add_url_rule("/endpoints", view_func=endpoints_page, methods=["GET"])
    pages.add_url_rule("/changes", view_func=changes_page, methods=["GET"])
