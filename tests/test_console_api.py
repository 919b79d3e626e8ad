"""The console's JSON API additions: cursor, filters, search, counts, attempts, bulk replay, audit."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests import sample_handlers
from tests.conftest import admin_headers, adyen_body, adyen_item, drain, stripe_event, stripe_headers


def get(client: FlaskClient, url: str) -> Any:
    response = client.get(url, headers=admin_headers())
    assert response.status_code == 200, response.data
    return response.get_json()


def post(client: FlaskClient, url: str, body: dict[str, Any]) -> Any:
    return client.post(url, json=body, headers=admin_headers())


def deliver_stripe(client: FlaskClient, event_id: str, type_: str = "payment_intent.succeeded",
                   obj_id: str = "pi_1") -> None:
    body = stripe_event(event_id, type_, obj={"id": obj_id, "object": "payment_intent"})
    assert client.post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200


@pytest.fixture
def mixed(any_app: Flask) -> FlaskClient:
    """Stripe events (one failing for good) and an Adyen payment with a capture."""
    client = any_app.test_client()
    sample_handlers.FAIL_TYPES.add("charge.refunded")
    for i in range(5):
        deliver_stripe(client, f"evt_{i}", obj_id=f"pi_{i}")
    body = stripe_event("evt_bad", "charge.refunded", obj={"id": "ch_9", "object": "charge"})
    client.post("/webhooks/stripe", data=body, headers=stripe_headers(body))
    client.post("/webhooks/adyen", data=adyen_body(adyen_item(psp="PAY7", reference="order-77")))
    client.post("/webhooks/adyen", data=adyen_body(adyen_item(psp="CAP7", code="CAPTURE", original="PAY7",
                                                              reference="order-77")))
    drain(any_app)
    sample_handlers.FAIL_TYPES.clear()
    return client


def ids(answer: Any) -> list[str]:
    return [e["event_id"] for e in answer["events"]]


def test_cursor_walks_every_event_once_newest_first(mixed: FlaskClient) -> None:
    everything = ids(get(mixed, "/admin/api/events?limit=100"))
    seen, cursor = [], ""
    while True:
        answer = get(mixed, f"/admin/api/events?limit=3&cursor={cursor}")
        seen += ids(answer)
        cursor = answer["next_cursor"]
        if cursor is None:
            break
    assert seen == everything and len(seen) == 8
    assert get(mixed, "/admin/api/events?limit=100")["next_cursor"] is None


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("q=PAY7", ["CAP7:CAPTURE:true", "PAY7:AUTHORISATION:true"]),  # the payment's pspReference
        ("q=order-77", ["CAP7:CAPTURE:true", "PAY7:AUTHORISATION:true"]),  # merchantReference
        ("q=CAP7:CAPTURE:true", ["CAP7:CAPTURE:true"]),  # event id
        ("q=pi_3", ["evt_3"]),  # Stripe object id
        ("q=evt_2", ["evt_2"]),
        ("q=ch_9&status=failed", ["evt_bad"]),  # found although its processing never completed
        ("endpoint=adyen&type=CAPTURE", ["CAP7:CAPTURE:true"]),
        ("status=failed", ["evt_bad"]),
        ("q=nothing", []),
    ],
)
def test_filters_and_search(mixed: FlaskClient, query: str, expected: list[str]) -> None:
    assert ids(get(mixed, f"/admin/api/events?{query}")) == expected


def test_time_range(mixed: FlaskClient) -> None:
    events = get(mixed, "/admin/api/events")["events"]
    middle = events[3]["received_at"]
    newer = ids(get(mixed, f"/admin/api/events?since={middle}"))
    older = ids(get(mixed, f"/admin/api/events?until={middle}"))
    assert newer + older == ids(get(mixed, "/admin/api/events")) and newer[-1] == events[3]["event_id"]


@pytest.mark.parametrize("query", ["cursor=%%%", "since=yesterday", "status=nope", "limit=0x"])
def test_bad_parameters_are_400(mixed: FlaskClient, query: str) -> None:
    assert mixed.get(f"/admin/api/events?{query}", headers=admin_headers()).status_code == 400


def test_counts(mixed: FlaskClient) -> None:
    counts = get(mixed, "/admin/api/counts")["counts"]
    assert (counts["processed"], counts["failed"], counts["queued"]) == (7, 1, 0)
    assert get(mixed, "/admin/api/counts?endpoint=adyen")["counts"]["processed"] == 2


def test_detail_has_attempts_verification_and_object_history(mixed: FlaskClient) -> None:
    bad = get(mixed, "/admin/api/events/stripe/evt_bad")
    assert [a["status"] for a in bad["attempt_log"]] == ["error"] * 5
    assert bad["attempt_log"][0]["error"] == "RuntimeError: downstream timeout while refunding"
    assert "Traceback" in bad["attempt_log"][-1]["traceback"]
    assert (bad["scheme"], bad["secret_index"]) == ("stripe-v1", 0) and abs(bad["skew_seconds"]) < 60
    cap = get(mixed, "/admin/api/events/adyen/CAP7:CAPTURE:true")
    assert cap["reference"] == "order-77" and cap["object"]["state"]["eventCode"] == "CAPTURE"
    assert [e["event_id"] for e in cap["object_events"]] == ["CAP7:CAPTURE:true", "PAY7:AUTHORISATION:true"]


def test_single_replay_is_audited_and_processing_is_409(mixed: FlaskClient, any_app: Flask) -> None:
    assert post(mixed, "/admin/api/events/stripe/evt_bad/replay", {}).status_code == 202
    drain(any_app)
    assert get(mixed, "/admin/api/events/stripe/evt_bad")["status"] == "processed"
    log = get(mixed, "/admin/api/replays")["replays"]
    assert (log[0]["who"], log[0]["reason"], log[0]["event_ids"]) == ("admin", "(no reason given)",
                                                                       [["stripe", "evt_bad"]])
    with any_app.extensions["webhooks"].engine.begin() as conn:
        conn.exec_driver_sql("UPDATE events SET status = 'processing' WHERE event_id = 'evt_1'")
    answer = post(mixed, "/admin/api/events/stripe/evt_1/replay", {"reason": "x"})
    assert (answer.status_code, answer.get_json()) == (409, {"error": "in_progress"})
    assert post(mixed, "/admin/api/events/stripe/nope/replay", {}).status_code == 404


def test_bulk_replay_dry_run_then_for_real(mixed: FlaskClient, any_app: Flask) -> None:
    dry = post(mixed, "/admin/api/events/replay", {"endpoint": "stripe", "status": "failed", "dry_run": True})
    assert dry.status_code == 200 and dry.get_json()["count"] == 1 and dry.get_json()["dry_run"] is True
    assert get(mixed, "/admin/api/replays")["replays"] == []  # a dry run changes nothing
    refused = post(mixed, "/admin/api/events/replay", {"endpoint": "stripe", "status": "failed"})
    assert (refused.status_code, refused.get_json()) == (400, {"error": "reason_required"})
    assert post(mixed, "/admin/api/events/replay", {"reason": "all"}).get_json() == {"error": "filter_required"}
    done = post(mixed, "/admin/api/events/replay", {"endpoint": "stripe", "status": "failed", "reason": "fixed"})
    assert done.status_code == 202
    assert done.get_json()["event_ids"] == [["stripe", "evt_bad"]] and done.get_json()["count"] == 1
    drain(any_app)
    assert get(mixed, "/admin/api/counts")["counts"]["failed"] == 0
    entry = get(mixed, "/admin/api/replays")["replays"][0]
    assert (entry["who"], entry["reason"], entry["count"]) == ("admin", "fixed", 1)
    assert entry["filter"] == {"provider": "stripe", "status": "failed"}


@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded", "text/plain", "multipart/form-data"])
def test_api_posts_must_be_json(client: FlaskClient, content_type: str | None) -> None:
    """A cross-site form or simple fetch cannot send application/json: this is the API's CSRF guard."""
    headers = admin_headers() | ({"Content-Type": content_type} if content_type else {})
    for url in ("/admin/api/events/stripe/evt_1/replay", "/admin/api/events/replay"):
        response = client.post(url, data=b'{"reason": "x"}', headers=headers)
        assert (response.status_code, response.get_json()) == (415, {"error": "json_required"})


@pytest.mark.parametrize("headers", [{"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"}])
def test_api_posts_from_another_site_are_refused_even_without_a_body(client: FlaskClient, headers: dict[str, str]) -> None:
    for url in ("/admin/api/events/stripe/evt_1/replay", "/admin/api/rejections/1/reverify"):
        response = client.post(url, headers=admin_headers() | headers)
        assert (response.status_code, response.get_json()) == (403, {"error": "cross_site_request"})


def test_bodiless_api_post_from_a_plain_client_is_accepted(client: FlaskClient) -> None:
    body = stripe_event("evt_plain")
    client.post("/webhooks/stripe", data=body, headers=stripe_headers(body))
    response = client.post("/admin/api/events/stripe/evt_plain/replay", headers=admin_headers())
    assert response.status_code == 202
