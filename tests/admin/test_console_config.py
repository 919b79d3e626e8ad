"""The console's runtime configuration pages (#32): Endpoints (create, edit, delete with a
confirmation, secrets), Destinations' create and rotate, and the Changes audit, all through the
admin API's operations: the file's validation beside its field, the file's items read-only, a
secret typed never shown again and a generated one shown once."""

from __future__ import annotations

import base64
import re

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from tests.conftest import admin_headers, base_config, make_app, stripe_event, stripe_headers
from tests.support.console import csrf_token

KEYS = "k1:" + base64.b64encode(b"1" * 32).decode()
SECRET = "whsec_ConsoleTypedSecretNeverShown_3e1"
DEST_SECRET = "whsec_" + base64.b64encode(b"destination-secret-bytes-24").decode()


@pytest.fixture
def app(sqlite_url: str) -> Flask:
    return make_app(base_config(sqlite_url, WEBHOOKS_ENCRYPTION_KEYS=KEYS))


def post(client: FlaskClient, url: str, form: dict[str, str]) -> TestResponse:
    """A console form's POST, with the CSRF token a page gave this client."""
    token = csrf_token(client, "/admin/endpoints/new")
    return client.post(url, data={**form, "csrf_token": token}, headers=admin_headers())


def page(client: FlaskClient, url: str) -> str:
    answer = client.get(url, headers=admin_headers())
    assert answer.status_code == 200, url
    return answer.get_data(as_text=True)


def create_shop(client: FlaskClient, **extra: str) -> None:
    form = {"name": "shop-eu", "provider": "stripe", "label": "merchant-7", "secret": SECRET, "options": ""} | extra
    answer = post(client, "/admin/endpoints/new", form)
    assert answer.status_code == 303, answer.get_data(as_text=True)


def test_each_page_renders_and_is_in_the_nav(client: FlaskClient) -> None:
    for url in ("/admin/endpoints", "/admin/endpoints/new", "/admin/destinations", "/admin/destinations/new"):
        html = page(client, url)
        assert 'href="/admin/endpoints"' in html and 'href="/admin/changes"' in html
    assert "No configuration change yet" in page(client, "/admin/changes")


def test_the_endpoints_page_shows_the_url_to_register(client: FlaskClient) -> None:
    answer = client.get("/admin/endpoints", headers=admin_headers(), base_url="https://hooks.example.com")
    html = answer.get_data(as_text=True)
    assert '<code class="mono url">https://hooks.example.com/webhooks/stripe</code>' in html
    assert 'data-copy="https://hooks.example.com/webhooks/stripe" hidden' in html  # shown by copy.js only
    assert "script-src 'self'" in answer.headers["Content-Security-Policy"]
    assert "edit_endpoint" not in html and "/admin/endpoints/stripe/edit" not in html  # the file's: read-only


def test_a_created_endpoint_accepts_a_signed_delivery(app: Flask, client: FlaskClient) -> None:
    create_shop(client, options="tolerance_seconds = 300\n")
    body = stripe_event("evt_console_1")
    assert client.post("/webhooks/shop-eu", data=body, headers=stripe_headers(body, SECRET)).status_code == 200
    html = page(client, "/admin/endpoints")
    assert "shop-eu" in html and "merchant-7" in html and SECRET not in html
    assert "last matched" in html and "/admin/endpoints/shop-eu/edit" in html
    edit = page(client, "/admin/endpoints/shop-eu/edit")
    assert "tolerance_seconds = 300" in edit and SECRET not in edit


def test_an_invalid_option_is_shown_beside_its_field_and_creates_nothing(client: FlaskClient) -> None:
    form = {"name": "shop-eu", "provider": "stripe", "secret": SECRET, "options": "tolerance_seconds = -5\n"}
    answer = post(client, "/admin/endpoints/new", form)
    html = answer.get_data(as_text=True)
    assert answer.status_code == 400
    assert re.search(r'<span class="error" id="error-options">[^<]*tolerance_seconds', html), html
    assert SECRET not in html
    assert "shop-eu" not in page(client, "/admin/endpoints")
    bad = post(client, "/admin/endpoints/new", form | {"options": "", "name": "bad name!"})
    assert bad.status_code == 400 and 'id="error-name"' in bad.get_data(as_text=True)


def test_a_file_owned_endpoint_cannot_be_changed(client: FlaskClient) -> None:
    for url in ("/admin/endpoints/stripe/edit", "/admin/endpoints/stripe/delete"):
        answer = post(client, url, {"options": "", "confirm": "yes"})
        assert answer.status_code == 409 and "managed_by_file" in answer.get_data(as_text=True)
    assert client.get("/admin/endpoints/stripe/edit", headers=admin_headers()).status_code == 409


def test_delete_needs_the_confirmation(client: FlaskClient) -> None:
    create_shop(client)
    assert "Yes, delete shop-eu" in page(client, "/admin/endpoints/shop-eu/delete")
    unconfirmed = post(client, "/admin/endpoints/shop-eu/delete", {})
    assert unconfirmed.status_code == 400 and "shop-eu" in page(client, "/admin/endpoints")
    assert post(client, "/admin/endpoints/shop-eu/delete", {"confirm": "yes"}).status_code == 303
    assert "/admin/endpoints/shop-eu/edit" not in page(client, "/admin/endpoints")
    body = stripe_event("evt_gone")
    assert client.post("/webhooks/shop-eu", data=body, headers=stripe_headers(body, SECRET)).status_code == 404


def test_secrets_are_added_and_expired(client: FlaskClient) -> None:
    create_shop(client)
    other = "whsec_TheSecondSecretOfShopEu_55e1"
    assert post(client, "/admin/endpoints/shop-eu/secrets", {"value": other}).status_code == 303
    edit = page(client, "/admin/endpoints/shop-eu/edit")
    ids = re.findall(r"/admin/endpoints/shop-eu/secrets/(sec_[0-9a-f]+)/expire", edit)
    assert len(ids) == 2 and other not in edit
    assert post(client, f"/admin/endpoints/shop-eu/secrets/{ids[0]}/expire", {}).status_code == 303
    last = post(client, f"/admin/endpoints/shop-eu/secrets/{ids[1]}/expire", {})
    assert last.status_code == 400 and "last_secret" in last.get_data(as_text=True)
    bad_time = post(client, "/admin/endpoints/shop-eu/secrets", {"value": other, "expires_at": "tomorrow"})
    html = bad_time.get_data(as_text=True)
    assert bad_time.status_code == 400 and 'id="error-expires_at"' in html and other not in html


def test_rotate_shows_the_value_once(client: FlaskClient) -> None:
    form = {"name": "orders-eu", "secret": DEST_SECRET, "options": 'url = "https://example.com/hooks"\n'}
    created = post(client, "/admin/destinations/new", form)
    assert created.status_code == 303, created.get_data(as_text=True)
    listed = page(client, "/admin/destinations")
    assert "/admin/destinations/orders-eu/rotate" in listed and DEST_SECRET not in listed
    rotated = post(client, "/admin/destinations/orders-eu/rotate", {"grace_seconds": "60"}).get_data(as_text=True)
    value = re.search(r'<code class="mono secret">(whsec_[^<]+)</code>', rotated)
    assert value, rotated
    after = page(client, "/admin/destinations")
    assert value.group(1) not in after and DEST_SECRET not in after and after.count("secret ") >= 2
    assert value.group(1) not in page(client, "/admin/destinations/orders-eu/edit")


def test_a_post_without_the_csrf_token_is_refused(client: FlaskClient) -> None:
    form = {"name": "shop-eu", "provider": "stripe", "secret": SECRET, "options": ""}
    assert client.post("/admin/endpoints/new", data=form, headers=admin_headers()).status_code == 403
    assert "shop-eu" not in page(client, "/admin/endpoints")


def test_the_changes_page_lists_who_did_what(client: FlaskClient) -> None:
    create_shop(client)
    post(client, "/admin/endpoints/shop-eu/edit", {"label": "merchant-8", "options": ""})
    html = page(client, "/admin/changes")
    assert html.index("update") < html.index("create")  # newest first
    assert re.search(r"<td>admin</td><td>create</td><td class=\"mono\">endpoint shop-eu</td>", html), html
    assert SECRET not in html and "fingerprint" in html
    assert client.get("/admin/changes?before=x", headers=admin_headers()).status_code == 400
