"""Which handlers ran: each attempt records them (``attempts.handlers``), the admin API's
``attempt_log`` and the event page show them, or that none matched; ``serve`` and ``worker`` log
the handlers found per event type at start-up."""

from __future__ import annotations

import logging

import pytest
from flask import Flask

from tests.conftest import admin_headers, base_config, drain, make_app, stripe_event, stripe_headers
from webhooks.worker import handlers


def deliver(app: Flask, event_id: str, type_: str) -> None:
    body = stripe_event(event_id, type_)
    assert app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200
    drain(app)


def attempt_log(app: Flask, event_id: str) -> list[dict[str, object]]:
    response = app.test_client().get(f"/admin/api/events/stripe/{event_id}", headers=admin_headers())
    assert response.status_code == 200
    assert response.json is not None and response.json["status"] == "processed"
    log: list[dict[str, object]] = response.json["attempt_log"]
    return log


def test_the_handlers_that_ran_are_in_the_api_and_on_the_page(any_app: Flask) -> None:
    deliver(any_app, "evt_refund", "charge.refunded")
    deliver(any_app, "evt_paid", "payment_intent.succeeded")
    assert attempt_log(any_app, "evt_refund")[-1]["handlers"] == [
        "tests.sample_handlers.refund",
        "tests.sample_handlers.record",
    ]
    assert attempt_log(any_app, "evt_paid")[-1]["handlers"] == ["tests.sample_handlers.record"]
    page = any_app.test_client().get("/admin/events/stripe/evt_refund", headers=admin_headers()).text
    assert "tests.sample_handlers.refund" in page and "tests.sample_handlers.record" in page


@pytest.fixture(params=["sqlite", "postgres"])
def no_handlers(request: pytest.FixtureRequest) -> Flask:
    """Like ``any_app``, with no handler module configured."""
    if request.param == "sqlite":
        return make_app(base_config(request.getfixturevalue("sqlite_url"), WEBHOOKS_HANDLERS=""))
    pg, rurl = request.getfixturevalue("pg_url"), request.getfixturevalue("redis_url")
    return make_app(base_config(pg, REDIS_URL=rurl, WEBHOOKS_HANDLERS=""))


def test_an_event_no_handler_matched_says_so(no_handlers: Flask) -> None:
    deliver(no_handlers, "evt_alone", "payment_intent.succeeded")
    # processed (its object was recorded), and the record says that no code of the user's ran
    assert attempt_log(no_handlers, "evt_alone")[-1]["handlers"] == []
    page = no_handlers.test_client().get("/admin/events/stripe/evt_alone", headers=admin_headers()).text
    assert "none matched" in page


def test_start_up_logs_the_handlers_per_event_type(caplog: pytest.LogCaptureFixture) -> None:
    handlers.load(["tests.sample_handlers"])
    with caplog.at_level(logging.INFO, logger="webhooks.handlers"):
        handlers.announce(["tests.sample_handlers"])
        handlers.announce([])
    assert [r.getMessage() for r in caplog.records] == [
        "handlers: adyen * → tests.sample_handlers.record; stripe * → tests.sample_handlers.record;"
        " stripe charge.refunded → tests.sample_handlers.refund",
        "no handlers (WEBHOOKS_HANDLERS is not set): events are stored and their objects recorded,"
        " no code of yours runs",
    ]
