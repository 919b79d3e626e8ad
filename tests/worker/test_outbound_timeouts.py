"""Every call out waits at most ``WEBHOOKS_OUTBOUND_TIMEOUT_SECONDS``: a provider API that accepts
the connection and never answers (a local server on 127.0.0.1) is given up within the bound, not
after the Stripe SDK's 80 s, and the event is retried, not lost.

The deadlines asserted (``GIVEN_UP``) are the feature: well below the SDK's 80 s (and the 30 s
``webhooks send`` waited), with room for a machine twice as slow over the configured 1 s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from flask import Flask

from tests.conftest import PAYLOADS, STRIPE_SECRET, admin_headers, base_config, drain, make_app, rows, stripe_headers
from tests.support.servers import serve_in_thread
from webhooks.configuration import settings as config
from webhooks.errors import ConfigError
from webhooks.service.cli import main

BOUND = "1"  # WEBHOOKS_OUTBOUND_TIMEOUT_SECONDS in these tests
GIVEN_UP = 15.0  # seconds: an assertion's deadline, well below the SDK's 80 s
METER = {"id": "mtr_test_61R9IeKLNjr5mCvpL41KpHbE7oM3Yc1R", "object": "billing.meter", "status": "active"}


class Silent(BaseHTTPRequestHandler):
    """Accepts, reads the request, and never answers the first ``silent`` ones (until released)."""

    silent = 0
    seen = 0
    release = threading.Event()

    def do_GET(self) -> None:
        Silent.seen += 1
        if Silent.seen <= Silent.silent:
            Silent.release.wait(60)  # the test releases it at its end; the client gave up long before
            return
        body = b'{"id": "%s", "object": "billing.meter", "status": "active"}' % METER["id"].encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def silent_api() -> Iterator[str]:
    """A local API whose first requests are never answered (``Silent.silent``: all by default)."""
    Silent.silent, Silent.seen = 1_000_000, 0
    Silent.release.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Silent)
    server.daemon_threads = True
    serve_in_thread(server)
    yield f"http://127.0.0.1:{server.server_port}"
    Silent.release.set()
    server.shutdown()
    server.server_close()


def stripe_app(sqlite_url: str, api: str) -> Flask:
    settings = base_config(
        sqlite_url, STRIPE_TEST_KEY="sk_test_123", WEBHOOKS_MAX_ATTEMPTS="2", WEBHOOKS_OUTBOUND_TIMEOUT_SECONDS=BOUND
    )
    settings["ENDPOINTS"]["stripe"].update(api_key="env:STRIPE_TEST_KEY", api_base=api)
    return make_app(settings)


def test_a_silent_stripe_api_is_given_up_within_the_bound_and_the_event_retried(
    sqlite_url: str, silent_api: str
) -> None:
    Silent.silent = 1  # the first re-fetch hangs; the retry's is answered
    app = stripe_app(sqlite_url, silent_api)
    body = (PAYLOADS / "stripe/v1.billing.meter.error_report_triggered__thin.json").read_bytes()
    assert app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200
    started = time.monotonic()
    drain(app)  # both attempts, in this thread (the retry is due at once: WEBHOOKS_RETRY_BASE_SECONDS=0)
    assert time.monotonic() - started < GIVEN_UP
    ((status, attempts),) = rows(app, "SELECT status, attempts FROM events")
    assert (status, attempts) == ("processed", 2)
    history = rows(app, "SELECT number, status, error FROM attempts ORDER BY number")
    assert [(n, s) for n, s, _ in history] == [(1, "error"), (2, "processed")]
    assert "APIConnectionError" in history[0][2]  # the SDK's timeout, recorded as the attempt's error
    obj = app.test_client().get(f"/admin/api/objects/stripe/billing.meter/{METER['id']}", headers=admin_headers())
    assert obj.get_json()["state"] == METER
    assert Silent.seen == 2


def test_reconcile_gives_up_on_a_silent_stripe_api_within_the_bound(
    sqlite_url: str, silent_api: str, tmp_path: Path
) -> None:
    make_app(base_config(sqlite_url))  # the schema
    toml = tmp_path / "webhooks.toml"
    toml.write_text(
        f'[endpoints.stripe]\nprovider = "stripe"\nsecrets = ["{STRIPE_SECRET}"]\n'
        f'api_key = "sk_test_123"\napi_base = "{silent_api}"\n'
    )
    env = {
        "DATABASE_URL": sqlite_url,
        "WEBHOOKS_CONFIG": str(toml),
        "REDIS_URL": "",
        "WEBHOOKS_OUTBOUND_TIMEOUT_SECONDS": BOUND,
    }
    started = time.monotonic()
    result = CliRunner().invoke(main, ["reconcile", "stripe", "--since", "1d"], env=env)
    assert time.monotonic() - started < GIVEN_UP
    assert result.exit_code == 1 and "Stripe API: /v1/events answered APIConnectionError" in result.output


def test_webhooks_send_gives_up_on_a_silent_receiver_within_the_bound(sqlite_url: str, silent_api: str) -> None:
    env = {
        "DATABASE_URL": sqlite_url,
        "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET,
        "WEBHOOKS_OUTBOUND_TIMEOUT_SECONDS": BOUND,
    }
    payload = PAYLOADS / "stripe/v1.billing.meter.error_report_triggered__thin.json"
    started = time.monotonic()
    result = CliRunner().invoke(
        main, ["send", "stripe", str(payload), "--url", f"{silent_api}/webhooks/stripe"], env=env
    )
    assert time.monotonic() - started < GIVEN_UP
    assert result.exit_code == 1 and "could not reach" in result.output and "TimeoutError" in result.output


def test_the_bound_is_configured_once_for_every_endpoint() -> None:
    endpoints = {"stripe": {"provider": "stripe", "secrets": [STRIPE_SECRET]}}
    assert config.load({"ENDPOINTS": endpoints}).endpoints["stripe"].outbound_timeout == 10  # the default
    settings = config.load({"ENDPOINTS": endpoints, "WEBHOOKS_OUTBOUND_TIMEOUT_SECONDS": "2.5"})
    assert settings.outbound_timeout == 2.5 and settings.endpoints["stripe"].outbound_timeout == 2.5
    for bad in ("0", "-1", "soon"):
        with pytest.raises(ConfigError, match="WEBHOOKS_OUTBOUND_TIMEOUT_SECONDS"):
            config.load({"ENDPOINTS": endpoints, "WEBHOOKS_OUTBOUND_TIMEOUT_SECONDS": bad})


def test_a_silent_paypal_api_is_given_up_within_the_bound_and_the_event_retried(
    sqlite_url: str, silent_api: str
) -> None:
    from tests.support.catalogue import SENT, endpoints
    from webhooks import providers

    settings = base_config(sqlite_url, WEBHOOKS_MAX_ATTEMPTS="2", WEBHOOKS_OUTBOUND_TIMEOUT_SECONDS=BOUND)
    settings["ENDPOINTS"]["paypal"] = dict(
        endpoints()["paypal"], provider="paypal", client_id="client-1", client_secret="secret-1", api_base=silent_api
    )
    app = make_app(settings)
    endpoint = app.extensions["webhooks"].settings.endpoints["paypal"]
    body, headers = providers.get("paypal").sign(endpoint, (PAYLOADS / SENT["paypal"]).read_bytes(), now=time.time())
    assert app.test_client().post("/webhooks/paypal", data=body, headers=headers).status_code == 200
    started = time.monotonic()
    drain(app)  # the OAuth call of each attempt hangs
    assert time.monotonic() - started < GIVEN_UP
    ((status, attempts, error),) = rows(app, "SELECT status, attempts, last_error FROM events")
    assert (status, attempts) == ("failed", 2)  # every attempt made and recorded, none lost
    assert "FetchError: PayPal OAuth" in error and "timed out" in error
    assert Silent.seen == 2
