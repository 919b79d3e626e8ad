"""A destination URL's query string and userinfo are secrets (#32): sealed in the database, shown
redacted (``?***``, ``***@``) everywhere after they are written — the API (the creating answer
too), the console, ``/metrics``, the ``serve`` banner and the logs — for the file's destinations
as for the database's; and the sender still gets the whole URL."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from tests.admin.test_runtime_config import KEYS, SECRET, SHOP, api, deliver, rt
from tests.conftest import admin_headers, base_config, drain, make_app, stripe_event, stripe_headers, wait_until
from tests.support import destination as local
from webhooks.forward.dispatcher import Forwarder
from webhooks.service.serving import banner

TOKEN = "s3cr3t-XYZ"
BUS_PASSWORD = "bus-pw-s3cr3t-77"
BUS_URL = f"redis://worker:{BUS_PASSWORD}@127.0.0.1:6390/0"
BUS = {"kind": "redis-stream", "url": BUS_URL, "stream": "s", "secrets": [local.SECRET], "allow_private": True}
KNOWN = (TOKEN, BUS_PASSWORD)


@pytest.fixture
def app(sqlite_url: str) -> Flask:
    return make_app(base_config(sqlite_url, WEBHOOKS_ENCRYPTION_KEYS=KEYS))


@contextlib.contextmanager
def forwarding(app: Flask) -> Iterator[None]:
    forwarder = Forwarder(rt(app).sessions, lambda: rt(app).settings.destinations).start()  # as a worker's
    try:
        yield
    finally:
        forwarder.stop()


def shown(app: Flask, *extra: str) -> list[tuple[str, str]]:
    """Every answer an operator or a scraper reads, as (path, text)."""
    client = app.test_client()
    paths = ["/admin/api/destinations", "/admin/api/endpoints", "/admin/api/audit", "/admin/destinations"]
    paths += ["/admin/changes", "/admin/endpoints", "/metrics", *extra]
    answers = [(p, client.get(p, headers=admin_headers())) for p in paths]
    assert all(a.status_code == 200 for _, a in answers), [(p, a.status_code) for p, a in answers]
    return [(p, a.get_data(as_text=True)) for p, a in answers]


def leaks(texts: list[tuple[str, str]]) -> list[str]:
    return [path for path, text in texts if any(k in text for k in KNOWN)]


def raw_database(sqlite_url: str) -> bytes:
    database = Path(sqlite_url.removeprefix("sqlite:///"))
    return b"".join(p.read_bytes() for p in database.parent.glob(database.name + "*") if p.is_file())


@pytest.mark.slow
def test_a_query_token_is_sealed_redacted_and_still_sent(
    app: Flask, sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    client = app.test_client()
    with forwarding(app), local.running() as dest:
        table = {"name": "orders", "url": f"{dest.url}?token={TOKEN}&v=2", "allow_private": True}
        created = api(client, "POST", "/destinations", {**table, "secrets": [dest.secret]})
        assert created.status_code == 201, created.get_json()
        assert created.get_json()["url"] == f"{dest.url}?***"  # the creating answer too: the caller has it
        answers = [("POST /destinations", created.get_data(as_text=True))]
        assert api(client, "POST", "/endpoints", {**SHOP, "forward": ["orders"]}).status_code == 201
        assert deliver(app, "shop-eu", "evt_query_1", SECRET) == 200
        drain(app)
        wait_until(lambda: dest.ids() == ["evt_query_1"], timeout=30)
        assert dest.seen[0].path == f"/hooks?token={TOKEN}&v=2"  # the sender's URL is whole

        changed = api(client, "PATCH", "/destinations/orders", {"timeout_seconds": 5})
        assert changed.status_code == 200
        answers.append(("PATCH /destinations/orders", changed.get_data(as_text=True)))
        assert deliver(app, "shop-eu", "evt_query_2", SECRET) == 200
        drain(app)
        wait_until(lambda: dest.ids() == ["evt_query_1", "evt_query_2"], timeout=30)
        assert dest.seen[1].path == f"/hooks?token={TOKEN}&v=2"  # a change that kept the URL kept its query

        # The redacted URL sent back (a GET, edited, PATCHed whole) is refused, never stored as the URL.
        back = api(client, "PATCH", "/destinations/orders", {"url": f"{dest.url}?***"})
        assert (back.status_code, back.get_json()["field"]) == (400, "url"), back.get_json()
        answers.append(("PATCH url", back.get_data(as_text=True)))

    pages = [
        "/admin/destinations/orders/edit",
        "/admin/events/shop-eu/evt_query_1",
        "/admin/api/events/shop-eu/evt_query_1",
    ]
    answers += shown(app, *pages)
    assert not leaks(answers)
    assert TOKEN.encode() not in raw_database(sqlite_url)
    assert TOKEN not in caplog.text


def test_a_bus_url_credentials_created_through_the_api_are_sealed(app: Flask, sqlite_url: str) -> None:
    client = app.test_client()
    created = api(client, "POST", "/destinations", {"name": "bus", **BUS})
    assert created.status_code == 201, created.get_json()
    assert created.get_json()["url"] == "redis://***@127.0.0.1:6390/0"
    [listed] = [d for d in api(client, "GET", "/destinations").get_json()["destinations"] if d["name"] == "bus"]
    assert listed["target"] == "redis://***@127.0.0.1:6390/0" and "url" not in listed
    assert sorted(s["purpose"] for s in listed["secrets"]) == ["signing", "url"]
    assert rt(app).settings.destinations["bus"].url == BUS_URL  # the publisher gets the credentials
    assert not leaks([("POST /destinations", created.get_data(as_text=True)), *shown(app)])
    assert BUS_PASSWORD.encode() not in raw_database(sqlite_url)


@pytest.mark.slow
def test_the_files_destinations_are_redacted_everywhere(sqlite_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    orders = {"url": f"http://127.0.0.1:9/in?token={TOKEN}", "secrets": [local.SECRET], "allow_private": True}
    config: dict[str, Any] = base_config(sqlite_url, DESTINATIONS={"orders": orders, "bus": BUS})
    config["ENDPOINTS"]["stripe"]["forward"] = ["orders", "bus"]
    app = make_app(config)
    listed = {d["name"]: d for d in api(app.test_client(), "GET", "/destinations").get_json()["destinations"]}
    assert (listed["orders"]["url"], listed["orders"]["target"]) == ("http://127.0.0.1:9/in?***",) * 2
    assert listed["bus"]["target"] == "redis://***@127.0.0.1:6390/0"
    assert not any(k in banner(rt(app).settings, ["http://127.0.0.1:8000"], None) for k in KNOWN)

    # A failed attempt to each (nothing listens on either port): its error and log lines redacted too.
    body = stripe_event("evt_file_dest")
    assert app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200
    drain(app)

    def attempted() -> Any:
        found = api(app.test_client(), "GET", "/events/stripe/evt_file_dest").get_json()["deliveries"]
        return len(found) == 2 and all(d["last_error"] for d in found)

    with forwarding(app):
        wait_until(attempted, timeout=60)
    assert not leaks(shown(app, "/admin/api/events/stripe/evt_file_dest", "/admin/events/stripe/evt_file_dest"))
    assert not any(k in caplog.text for k in KNOWN)
