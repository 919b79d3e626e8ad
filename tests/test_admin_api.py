"""The admin JSON API: auth, list filters, detail, objects."""

from __future__ import annotations

import base64

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.conftest import admin_headers, base_config, drain, make_app, stripe_event, stripe_headers

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
    assert set(events[0]) == {"provider", "endpoint", "event_id", "type", "status", "attempts", "received_at",
                              "processed_at", "last_error"}
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
    replayed = client.post("/admin/api/events/stripe_connect/evt_c1/replay", json={"reason": "test"},
                           headers=admin_headers()).get_json()
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
