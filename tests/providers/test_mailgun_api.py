"""Mailgun's event data is unsigned: with ``api_key`` and ``domain``, handlers see only the copy in
the domain's event log (a fake Mailgun on 127.0.0.1), and event data that differs from Mailgun's
copy fails the event without a handler run, even under a genuine signature."""

from __future__ import annotations

import base64
import copy
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from flask import Flask

from tests import state_handlers
from tests.conftest import PAYLOADS, base_config, drain, make_app, rows
from tests.fake_apis import serve
from tests.support.catalogue import HOST, endpoints
from tests.support.servers import serve_in_thread
from webhooks import providers
from webhooks.errors import ConfigError
from webhooks.providers import mailgun_api
from webhooks.providers.api import FetchError, MismatchError
from webhooks.providers.base import Endpoint

LOG: dict[str, dict[str, Any]] = {}  # Mailgun's event log: id → event-data
SEEN: list[tuple[str, dict[str, list[str]], str]] = []
AUTH = "Basic " + base64.b64encode(b"api:key-mailgun-api").decode()
DELIVERED = json.loads((PAYLOADS / "mailgun/delivered__basic.json").read_bytes())["event-data"]


def fake_mailgun(method: str, path: str, query: Any, headers: Any, body: bytes) -> tuple[int, Any]:
    SEEN.append((path, query, headers.get("Authorization")))
    if headers.get("Authorization") != AUTH:
        return 401, {"message": "Invalid private key"}
    if path != "/v3/mg.example.com/events":
        return 404, {"message": "Domain not found"}
    wanted = [
        e
        for e in LOG.values()
        if int(query["begin"][0]) <= e["timestamp"] <= int(query["end"][0])
        and query.get("message-id", [mailgun_api.message_id(e)])[0] == mailgun_api.message_id(e)
    ]
    return 200, {"items": wanted, "paging": {}}


@pytest.fixture(params=["sqlite", "postgres"])
def mailgun_app(request: pytest.FixtureRequest) -> Iterator[Flask]:
    LOG.clear()
    SEEN.clear()
    with serve(fake_mailgun) as base:
        if request.param == "sqlite":
            config = base_config(request.getfixturevalue("sqlite_url"))
        else:
            config = base_config(request.getfixturevalue("pg_url"), REDIS_URL=request.getfixturevalue("redis_url"))
        config["WEBHOOKS_HANDLERS"] = "tests.state_handlers"
        state_handlers.reset()
        config["ENDPOINTS"] = {
            "mailgun": dict(
                endpoints()["mailgun"],
                provider="mailgun",
                api_key="key-mailgun-api",
                domain="mg.example.com",
                api_base=base,
            )
        }
        yield make_app(config)


def deliver(app: Flask, event_data: dict[str, Any]) -> int:
    endpoint = app.extensions["webhooks"].settings.endpoints["mailgun"]
    body, headers = providers.get("mailgun").sign(
        endpoint, json.dumps({"event-data": event_data}).encode(), now=time.time()
    )
    response = app.test_client().post("/webhooks/mailgun", data=body, headers=headers, base_url=f"https://{HOST}")
    return response.status_code


def test_handlers_see_mailguns_copy(mailgun_app: Flask) -> None:
    LOG[DELIVERED["id"]] = copy.deepcopy(DELIVERED) | {"storage": {"key": "from-the-log"}}
    assert deliver(mailgun_app, DELIVERED) == 200
    drain(mailgun_app)
    assert [c["event_id"] for c in state_handlers.CALLS] == [DELIVERED["id"]]
    assert state_handlers.CALLS[0]["data"] == {"event-data": LOG[DELIVERED["id"]]}
    ((path, query, auth),) = SEEN
    assert (path, auth) == ("/v3/mg.example.com/events", AUTH)
    assert query["message-id"] == [mailgun_api.message_id(DELIVERED)] and "event" not in query


@pytest.mark.parametrize(
    ("change", "field"),
    [({"event": "failed"}, "event"), ({"recipient": "mallory@example.com"}, "recipient")],
)
def test_event_data_that_is_not_mailguns_is_never_acted_on(
    mailgun_app: Flask, change: dict[str, str], field: str
) -> None:
    """The attack the signature leaves open: a captured signature, delivered first with other event
    data under the genuine id. It verifies and is stored; it is never acted on."""
    logged = copy.deepcopy(DELIVERED) | change
    LOG[DELIVERED["id"]] = copy.deepcopy(DELIVERED)
    assert deliver(mailgun_app, logged) == 200
    drain(mailgun_app)
    ((status, error),) = rows(mailgun_app, "SELECT status, last_error FROM events")
    assert status == "failed" and "differs from the delivered body in" in error and field in error
    assert state_handlers.CALLS == []


def test_no_copy_in_the_log_is_retried_never_acted_on() -> None:
    with serve(fake_mailgun) as base:
        LOG.clear()
        endpoint = Endpoint(
            "mailgun",
            "mailgun",
            ("k",),
            options={"api_key": "key-mailgun-api", "domain": "mg.example.com", "api_base": base},
        )
        with pytest.raises(FetchError, match="has no event"):
            mailgun_api.event(endpoint, DELIVERED)
        with pytest.raises(FetchError, match="401"):
            mailgun_api.event(
                Endpoint("m", "mailgun", ("k",), options={**endpoint.options, "api_key": "bad"}), DELIVERED
            )
        with pytest.raises(MismatchError):
            mailgun_api.event(endpoint, {"event": "delivered"})


@pytest.mark.parametrize(
    "options",
    [
        {"api_key": "k"},
        {"domain": "mg.example.com"},
        {"api_key": "k", "domain": "d", "region": "asia"},
        {"api_base": "ftp://x"},
    ],
)
def test_start_up_refuses_api_options_that_cannot_work(options: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="'mailgun'"):
        providers.get("mailgun").validate(Endpoint("mailgun", "mailgun", ("k",), options=options))


def test_region_pins_the_host() -> None:
    eu = Endpoint("m", "mailgun", ("k",), options={"api_key": "k", "domain": "d", "region": "eu"})
    assert mailgun_api.base_url(eu) == "https://api.eu.mailgun.net"
    assert mailgun_api.base_url(Endpoint("m", "mailgun", ("k",))) == "https://api.mailgun.net"


def test_a_silent_event_log_is_given_up_within_the_endpoints_bound() -> None:
    release = threading.Event()

    class Silent(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            release.wait(30)  # never answers while the client waits

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Silent)
    server.daemon_threads = True
    serve_in_thread(server)
    endpoint = Endpoint(
        "mailgun",
        "mailgun",
        ("k",),
        options={"api_key": "k", "domain": "mg.example.com", "api_base": f"http://127.0.0.1:{server.server_port}"},
        outbound_timeout=0.5,
    )
    started = time.monotonic()
    try:
        with pytest.raises(FetchError, match="Mailgun"):
            mailgun_api.event(endpoint, DELIVERED)
        assert time.monotonic() - started < 10  # the bound is 0.5 s; 10 s holds on a slow machine
    finally:
        release.set()
        server.shutdown()
        server.server_close()
