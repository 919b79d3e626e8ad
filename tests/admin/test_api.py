"""The admin JSON API: auth, list filters (cursor, search, time range), counts, detail (attempts,
verification, object history), objects, replay (single and bulk, dry run, audit), and its POST rules."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests import sample_handlers
from tests.conftest import (
    admin_headers,
    adyen_body,
    adyen_item,
    base_config,
    drain,
    make_app,
    runtime,
    stripe_event,
    stripe_headers,
)

ROUTES = ["/admin/api/events", "/admin/api/events/stripe/evt_1", "/admin/api/objects/stripe/payment_intent/pi_1"]


def test_no_password_means_no_console(sqlite_url: str) -> None:
    app = make_app(base_config(sqlite_url, WEBHOOKS_ADMIN_PASSWORD=""))
    for route in ROUTES:
        assert app.test_client().get(route, headers=admin_headers()).status_code == 404


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("auth", [None, "admin:wrong", "root:admin-test-password"])
def test_wrong_credentials_are_refused(client: FlaskClient, route: str, auth: str | None) -> None:
    headers = {"Authorization": "Basic " + base64.b64encode(auth.encode()).decode()} if auth else {}
    response = client.get(route, headers=headers)
    assert response.status_code == 401 and "WWW-Authenticate" in response.headers


def test_replay_needs_auth(client: FlaskClient) -> None:
    assert client.post("/admin/api/events/stripe/evt_1/replay", json={"reason": "x"}).status_code == 401


@pytest.fixture
def filled(app: Flask) -> FlaskClient:
    client = app.test_client()
    for i, type_ in enumerate(["payment_intent.created", "payment_intent.succeeded", "charge.refunded"]):
        body = stripe_event(f"evt_{i}", type_, 1700000000 + i)
        assert client.post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200
    drain(app)
    body = stripe_event("evt_3", "payment_intent.canceled", 1700000003)
    client.post("/webhooks/stripe", data=body, headers=stripe_headers(body))
    return client


def test_list_newest_first_with_fields(filled: FlaskClient) -> None:
    events = filled.get("/admin/api/events", headers=admin_headers()).get_json()["events"]
    assert [e["event_id"] for e in events] == ["evt_3", "evt_2", "evt_1", "evt_0"]
    assert set(events[0]) == {
        "provider",
        "endpoint",
        "event_id",
        "type",
        "status",
        "attempts",
        "received_at",
        "processed_at",
        "last_error",
    }
    assert (events[0]["status"], events[1]["status"], events[1]["attempts"]) == ("queued", "processed", 1)


def test_event_names_its_endpoint_as_provider_and_endpoint(sqlite_url: str) -> None:
    """An endpoint named apart from its kind: ``provider`` (kept) and ``endpoint`` (added) both
    hold the endpoint's name, in the list, the detail, the object's events and a replay."""
    config = base_config(sqlite_url)
    config["ENDPOINTS"]["stripe_connect"] = dict(config["ENDPOINTS"]["stripe"])
    client = make_app(config).test_client()
    body = stripe_event("evt_c1")
    assert client.post("/webhooks/stripe_connect", data=body, headers=stripe_headers(body)).status_code == 200
    drain(client.application)
    listed = client.get("/admin/api/events?endpoint=stripe_connect", headers=admin_headers()).get_json()["events"]
    detail = client.get("/admin/api/events/stripe_connect/evt_c1", headers=admin_headers()).get_json()
    replayed = client.post(
        "/admin/api/events/stripe_connect/evt_c1/replay", json={"reason": "test"}, headers=admin_headers()
    ).get_json()
    for answer in (listed[0], detail, detail["object_events"][0], replayed):
        assert (answer["provider"], answer["endpoint"]) == ("stripe_connect", "stripe_connect"), answer
    assert detail["kind"] == "stripe"
    assert client.get("/admin/api/events?provider=stripe", headers=admin_headers()).get_json()["events"] == []


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("status=processed", ["evt_2", "evt_1", "evt_0"]),
        ("status=queued", ["evt_3"]),
        ("type=charge.refunded", ["evt_2"]),
        ("provider=adyen", []),
        ("provider=stripe&limit=2", ["evt_3", "evt_2"]),
    ],
)
def test_list_filters(filled: FlaskClient, query: str, expected: list[str]) -> None:
    events = filled.get(f"/admin/api/events?{query}", headers=admin_headers()).get_json()["events"]
    assert [e["event_id"] for e in events] == expected


def test_bad_filter_is_a_400(filled: FlaskClient) -> None:
    assert filled.get("/admin/api/events?status=bogus", headers=admin_headers()).status_code == 400
    assert filled.get("/admin/api/events?limit=x", headers=admin_headers()).status_code == 400


def test_detail_has_payload_and_headers(filled: FlaskClient) -> None:
    event = filled.get("/admin/api/events/stripe/evt_1", headers=admin_headers()).get_json()
    assert event["payload"] == stripe_event("evt_1", "payment_intent.succeeded", 1700000001).decode()
    assert "Stripe-Signature" in event["headers"]
    assert (event["object_type"], event["object_id"]) == ("payment_intent", "pi_1")
    assert filled.get("/admin/api/events/stripe/nope", headers=admin_headers()).status_code == 404


def test_object_state(filled: FlaskClient) -> None:
    obj = filled.get("/admin/api/objects/stripe/payment_intent/pi_1", headers=admin_headers()).get_json()
    assert obj["last_event_id"] == "evt_2"  # charge.refunded carried pi_1 too, one second later
    assert set(obj) >= {"version", "state", "last_event_id"}


# ===== the console's additions: cursor, filters, search, counts, attempts, bulk replay, audit =====


def get(client: FlaskClient, url: str) -> Any:
    response = client.get(url, headers=admin_headers())
    assert response.status_code == 200, response.data
    return response.get_json()


def post(client: FlaskClient, url: str, body: dict[str, Any]) -> Any:
    return client.post(url, json=body, headers=admin_headers())


def deliver_stripe(
    client: FlaskClient, event_id: str, type_: str = "payment_intent.succeeded", obj_id: str = "pi_1"
) -> None:
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
    client.post(
        "/webhooks/adyen",
        data=adyen_body(adyen_item(psp="CAP7", code="CAPTURE", original="PAY7", reference="order-77")),
    )
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
    assert (log[0]["who"], log[0]["reason"], log[0]["event_ids"]) == (
        "admin",
        "(no reason given)",
        [["stripe", "evt_bad"]],
    )
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
def test_api_posts_from_another_site_are_refused_even_without_a_body(
    client: FlaskClient, headers: dict[str, str]
) -> None:
    for url in ("/admin/api/events/stripe/evt_1/replay", "/admin/api/rejections/1/reverify"):
        response = client.post(url, headers=admin_headers() | headers)
        assert (response.status_code, response.get_json()) == (403, {"error": "cross_site_request"})


def test_bodiless_api_post_from_a_plain_client_is_accepted(client: FlaskClient) -> None:
    body = stripe_event("evt_plain")
    client.post("/webhooks/stripe", data=body, headers=stripe_headers(body))
    response = client.post("/admin/api/events/stripe/evt_plain/replay", headers=admin_headers())
    assert response.status_code == 202


def test_two_replays_deleting_one_job_both_succeed(any_app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    """Replays of one event at once (20 in tests/forward/test_once.py): the second to delete the
    finished job finds it gone; that is no error (it was a 500 for the operator who clicked)."""
    from webhooks.admin.replay import replay_one

    rt = runtime(any_app)
    body = stripe_event("evt_two_replays")
    assert any_app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200
    drain(any_app)
    stale = rt.queue._job("stripe", "evt_two_replays")
    assert stale is not None
    stale.delete()  # what the other replay did between this one's fetch and its delete
    monkeypatch.setattr(rt.queue, "_job", lambda endpoint, event_id: stale)
    outcome = replay_one(rt, "stripe", "evt_two_replays", who="test", reason="twice")
    assert outcome.count == 1 and outcome.queued
    drain(any_app)
    assert rt.store.status(("stripe", "evt_two_replays")) == "processed"
