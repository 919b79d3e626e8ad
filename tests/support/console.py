"""The console as its tests reach it: every admin route, and a form's CSRF token."""

from __future__ import annotations

import re

from flask import Flask
from flask.testing import FlaskClient

from tests.conftest import admin_headers


def admin_urls(app: Flask) -> list[tuple[str, str]]:
    """Every route under /admin (pages, API, static) with sample values, and its methods."""
    values = {
        "provider": "stripe",
        "event_id": "evt_1",
        "object_type": "payment_intent",
        "object_id": "pi_1",
        "filename": "console.css",
        "rejection_id": "1",
        "name": "orders",
        "secret_id": "sec_1",
    }
    found = []
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith("/admin"):
            url = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: values[m.group(1)], rule.rule)
            found += [(method, url) for method in sorted(rule.methods - {"HEAD", "OPTIONS"})]
    return found


def csrf_token(client: FlaskClient, url: str) -> str:
    html = client.get(url, headers=admin_headers()).get_data(as_text=True)
    match = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert match, "no token in the form"
    return match.group(1)
