"""The receiver mounted in an existing Flask app (#41, docs/embedding.md): ``Webhooks(app,
url_prefix="/hooks")`` answers deliveries ahead of the user's app, so its ``before_request`` hooks,
CSRF extension, body parsing and ``MAX_CONTENT_LENGTH`` never see one; a Stripe event signed by the
Stripe SDK verifies over the bytes as sent; the console, its links, its CSRF rule and the endpoints'
URLs follow the prefix; an unmigrated database is a 503 that says to run ``webhooks db upgrade``."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest
from flask import Flask, request
from flask_wtf.csrf import CSRFProtect

from tests.conftest import admin_headers, base_config, rows, stripe_event, stripe_headers
from tests.support.templates import migrated
from webhooks.service.embedding import Webhooks
from webhooks.tables import revisions


def user_app(seen: list[str]) -> Flask:
    """An application developer's own app: CSRF on every POST, a hook that parses every body, a
    10-byte body limit."""
    app = Flask("shop")
    app.config.update(SECRET_KEY="shop-secret", MAX_CONTENT_LENGTH=10, WTF_CSRF_ENABLED=True)
    CSRFProtect(app)

    @app.before_request
    def parse_everything() -> None:
        seen.append(f"{request.path} {dict(request.form)}")

    @app.post("/orders")
    def orders() -> str:
        return "ordered"

    @app.get("/")
    def home() -> str:
        return "shop"

    return app


@pytest.fixture
def mounted(sqlite_url: str) -> tuple[Flask, Webhooks, list[str]]:
    migrated(sqlite_url)
    seen: list[str] = []
    app = user_app(seen)
    extension = Webhooks(app, url_prefix="/hooks", console=True, config=base_config(sqlite_url))
    return app, extension, seen


def test_a_delivery_under_the_prefix_never_meets_the_users_app(mounted: tuple[Flask, Webhooks, list[str]]) -> None:
    app, extension, seen = mounted
    client = app.test_client()
    body = stripe_event("evt_mounted")  # far over the user's 10-byte MAX_CONTENT_LENGTH
    answer = client.post("/hooks/webhooks/stripe", data=body, headers=stripe_headers(body))  # the SDK's signature
    assert answer.status_code == 200, answer.data
    assert seen == []  # no before_request, no form parsing, no CSRF check
    assert [r[0] for r in rows(extension.app, "SELECT event_id FROM events")] == ["evt_mounted"]
    forged = client.post("/hooks/webhooks/stripe", data=body, headers=stripe_headers(body, secret="whsec_other"))
    assert forged.status_code == 400 and forged.get_json() == {"error": "signature_mismatch"}
    # The user's app is untouched: its CSRF rule, its hooks, its own routes and 404s.
    assert client.post("/orders", data={"item": "x"}).status_code == 400  # Flask-WTF: no CSRF token
    assert client.get("/").data == b"shop"
    assert client.post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code in (400, 404, 413)
    assert seen and all(not s.startswith("/hooks") for s in seen)


def test_the_console_and_its_links_follow_the_prefix(mounted: tuple[Flask, Webhooks, list[str]]) -> None:
    app, _, _ = mounted
    client = app.test_client()
    page = client.get("/hooks/admin/", headers=admin_headers())
    assert page.status_code == 200
    links = set(re.findall(r'(?:href|action|src)="(/[^"]*)"', page.get_data(as_text=True)))
    assert links and all(link.startswith("/hooks/") for link in links), sorted(links)
    assert client.get("/hooks/healthz").get_json()["status"] == "ok"
    assert client.get("/hooks/").headers["Location"].endswith("/hooks/admin/")
    cookie = page.headers.get("Set-Cookie", "")
    assert "Path=/hooks/admin" in cookie, cookie  # the CSRF nonce reaches the mounted console only
    endpoints = client.get("/hooks/admin/api/endpoints", headers=admin_headers()).get_json()["endpoints"]
    assert {e["name"]: e["url"] for e in endpoints}["stripe"] == "/hooks/webhooks/stripe"  # what to register


def test_a_console_form_works_under_the_prefix(mounted: tuple[Flask, Webhooks, list[str]]) -> None:
    app, extension, _ = mounted
    client = app.test_client()
    body = stripe_event("evt_replayed")
    assert client.post("/hooks/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200
    page = client.get("/hooks/admin/events/stripe/evt_replayed", headers=admin_headers())
    assert page.status_code == 200, page.data[:300]
    form = re.search(
        r'<form[^>]*action="(/hooks/[^"]*replay[^"]*)".*?name="csrf_token" value="([^"]+)"',
        page.get_data(as_text=True),
        re.S,
    )
    assert form is not None
    origin = {"Origin": "http://localhost"}
    said = {"reason": "replayed under the mount"}
    replay = client.post(form.group(1), data={"csrf_token": form.group(2)} | said, headers=admin_headers() | origin)
    assert replay.status_code in (200, 302, 303), re.sub(r"\s+", " ", replay.get_data(as_text=True))[-1500:]
    forged = client.post(form.group(1), data={"csrf_token": "forged"} | said, headers=admin_headers() | origin)
    assert forged.status_code == 403, forged.status_code
    assert len(rows(extension.app, "SELECT 1 FROM replays")) == 1  # the real one only


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_an_unmigrated_database_is_a_503_that_says_to_migrate(
    db: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    url = request.getfixturevalue("sqlite_url" if db == "sqlite" else "pg_url")  # never migrated
    app = user_app([])
    Webhooks(app, url_prefix="/hooks", config=base_config(url))
    body = stripe_event("evt_early")
    with caplog.at_level(logging.WARNING, logger="webhooks.receive"):
        answer = app.test_client().post("/hooks/webhooks/stripe", data=body, headers=stripe_headers(body))
    assert answer.status_code == 503 and answer.headers["Retry-After"] == "30"
    said = f"database schema never migrated, head is {revisions.head()}: run `webhooks db upgrade`"
    assert answer.get_json() == {"error": "unavailable", "detail": said}
    lines = [r.getMessage() for r in caplog.records if r.name == "webhooks.receive" and r.levelno >= logging.WARNING]
    assert lines == [f"store failed, answering 503: {said}"]


@pytest.mark.parametrize("prefix", ["/a?b", "/a#b", "/a//b"])
def test_a_prefix_that_is_not_a_path_is_refused(prefix: str) -> None:
    with pytest.raises(ValueError, match="url_prefix"):
        Webhooks(url_prefix=prefix)


def test_the_django_recipe_mounts_the_receiver_ahead_of_django(sqlite_url: str) -> None:
    """docs/embedding.md's Django recipe: a real Django WSGI app (CSRF middleware on) with the
    receiver under /hooks through werkzeug's DispatcherMiddleware."""
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(
            DEBUG=False, SECRET_KEY="shop", ALLOWED_HOSTS=["localhost"], ROOT_URLCONF=__name__,
            MIDDLEWARE=["django.middleware.csrf.CsrfViewMiddleware"], DATA_UPLOAD_MAX_MEMORY_SIZE=10,
        )  # fmt: skip
        django.setup()
    from django.core.wsgi import get_wsgi_application
    from werkzeug.middleware.dispatcher import DispatcherMiddleware
    from werkzeug.test import Client

    import webhooks

    migrated(sqlite_url)
    mounted = webhooks.create_app(base_config(sqlite_url))
    client = Client(DispatcherMiddleware(get_wsgi_application(), {"/hooks": mounted}))
    body = stripe_event("evt_django")
    answer = client.post("/hooks/webhooks/stripe", data=body, headers=stripe_headers(body))
    assert answer.status_code == 200, answer.get_data()
    assert [r[0] for r in rows(mounted, "SELECT event_id FROM events")] == ["evt_django"]
    assert client.post("/orders", data={"x": "y"}).status_code == 403  # Django's own CSRF, untouched


def test_the_fastapi_recipe_mounts_the_receiver_through_a2wsgi(sqlite_url: str) -> None:
    from a2wsgi import WSGIMiddleware
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    import webhooks

    migrated(sqlite_url)
    mounted = webhooks.create_app(base_config(sqlite_url))
    app = FastAPI()
    app.mount("/hooks", WSGIMiddleware(mounted))  # type: ignore[arg-type]
    body = stripe_event("evt_fastapi")
    with TestClient(app) as client:
        answer = client.post("/hooks/webhooks/stripe", content=body, headers=stripe_headers(body))
        assert answer.status_code == 200, answer.text
        forged = client.post("/hooks/webhooks/stripe", content=body, headers=stripe_headers(body, secret="whsec_x"))
        assert forged.status_code == 400
    assert [r[0] for r in rows(mounted, "SELECT event_id FROM events")] == ["evt_fastapi"]


def __getattr__(name: str) -> Any:
    """The Django test's ROOT_URLCONF is this module: one route, ``POST /orders``, under Django's CSRF."""
    if name != "urlpatterns":
        raise AttributeError(name)
    from django.http import HttpResponse
    from django.urls import path

    return [path("orders", lambda request: HttpResponse("ordered"))]
