"""Which secret matched (#32): an event records the matching database secret's id beside its
index (``secret_id``; null for the file's secrets, which have no id)."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask

from tests.admin.test_runtime_config import KEYS, OTHER, SECRET, SHOP, api, deliver
from tests.conftest import admin_headers, base_config, make_app, stripe_event, stripe_headers


@pytest.fixture
def app(sqlite_url: str) -> Flask:
    return make_app(base_config(sqlite_url, WEBHOOKS_ENCRYPTION_KEYS=KEYS))


def secrets_of(app: Flask, name: str) -> dict[str, dict[str, Any]]:
    """The endpoint's secrets as listed, by id."""
    [found] = [e for e in api(app.test_client(), "GET", "/endpoints").get_json()["endpoints"] if e["name"] == name]
    return {s["id"]: s for s in found["secrets"]}


def two_secrets(app: Flask) -> tuple[str, str]:
    """``shop-eu`` made through the API with ``SECRET`` and then ``OTHER``: their ids, in that order."""
    client = app.test_client()
    assert api(client, "POST", "/endpoints", SHOP).status_code == 201
    added = api(client, "POST", "/endpoints/shop-eu/secrets", {"value": OTHER})
    assert added.status_code == 201
    [first] = [i for i in secrets_of(app, "shop-eu") if i != added.get_json()["id"]]
    return first, added.get_json()["id"]


def detail(app: Flask, name: str, event_id: str) -> Any:
    return api(app.test_client(), "GET", f"/events/{name}/{event_id}").get_json()


def test_an_event_names_the_database_secret_that_matched(app: Flask) -> None:
    first, second = two_secrets(app)
    assert deliver(app, "shop-eu", "evt_by_other", OTHER) == 200
    assert deliver(app, "shop-eu", "evt_by_first", SECRET) == 200
    by_other, by_first = detail(app, "shop-eu", "evt_by_other"), detail(app, "shop-eu", "evt_by_first")
    assert (by_other["secret_index"], by_other["secret_id"]) == (1, second)
    assert (by_first["secret_index"], by_first["secret_id"]) == (0, first)
    page = app.test_client().get("/admin/events/shop-eu/evt_by_other", headers=admin_headers())
    assert page.status_code == 200 and second in page.get_data(as_text=True)

    # The file's endpoint: its secrets have no id; secret_index alone says which matched.
    body = stripe_event("evt_file")
    assert app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200
    from_file = detail(app, "stripe", "evt_file")
    assert (from_file["secret_index"], from_file["secret_id"]) == (0, None)
