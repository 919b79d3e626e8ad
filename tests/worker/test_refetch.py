"""Thin Stripe events carry no snapshot: the worker re-fetches the object from the API (here a
small local server that behaves like Stripe's) and stores what it answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from flask import Flask

from tests.conftest import PAYLOADS, admin_headers, base_config, drain, make_app, rows, stripe_headers
from tests.support.servers import serve_in_thread

METER = {"id": "mtr_test_61R9IeKLNjr5mCvpL41KpHbE7oM3Yc1R", "object": "billing.meter", "status": "active"}


class FakeStripe(BaseHTTPRequestHandler):
    seen: list[tuple[str, str | None]] = []
    status = 200

    def do_GET(self) -> None:
        FakeStripe.seen.append((self.path, self.headers.get("Authorization")))
        found = self.path == f"/v1/billing/meters/{METER['id']}" and FakeStripe.status == 200
        body = json.dumps(METER if found else {"error": {"type": "invalid_request_error"}}).encode()
        self.send_response(200 if found else FakeStripe.status if FakeStripe.status != 200 else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def stripe_api() -> Iterator[str]:
    FakeStripe.seen, FakeStripe.status = [], 200
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeStripe)
    serve_in_thread(server)
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


@pytest.fixture
def refetch_app(sqlite_url: str, stripe_api: str) -> Flask:
    config = base_config(sqlite_url, STRIPE_TEST_KEY="sk_test_123", WEBHOOKS_MAX_ATTEMPTS="2")
    config["ENDPOINTS"]["stripe"].update(api_key="env:STRIPE_TEST_KEY", api_base=stripe_api)
    return make_app(config)


def deliver_thin(app: Flask) -> None:
    body = (PAYLOADS / "stripe/v1.billing.meter.error_report_triggered__thin.json").read_bytes()
    assert app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200
    drain(app)


def test_thin_event_state_is_fetched_from_the_api(refetch_app: Flask) -> None:
    deliver_thin(refetch_app)
    obj = refetch_app.test_client().get(
        f"/admin/api/objects/stripe/billing.meter/{METER['id']}", headers=admin_headers()
    )
    assert obj.get_json()["state"] == METER
    assert FakeStripe.seen == [(f"/v1/billing/meters/{METER['id']}", "Bearer sk_test_123")]


def test_api_errors_are_retried_then_failed(refetch_app: Flask) -> None:
    FakeStripe.status = 500
    deliver_thin(refetch_app)
    ((status, error),) = rows(refetch_app, "SELECT status, last_error FROM events")
    assert status == "failed" and "answered 500" in error
    assert len(FakeStripe.seen) == 2  # WEBHOOKS_MAX_ATTEMPTS


def test_without_api_key_the_thin_reference_is_stored(app: Flask) -> None:
    deliver_thin(app)
    ((state,),) = rows(app, "SELECT state FROM objects")
    assert json.loads(state) == {
        "related_object": {"id": METER["id"], "type": "billing.meter", "url": f"/v1/billing/meters/{METER['id']}"},
        "snapshot": False,
    }
