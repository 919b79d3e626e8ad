"""Stripe through the receiver: SDK-signed deliveries stored, every bad one refused with nothing stored."""

from __future__ import annotations

import json
import time

import pytest
import stripe
from flask.testing import FlaskClient

from tests.conftest import STRIPE_SECRET, rows, stripe_event, stripe_headers
from webhooks.errors import VerificationError
from webhooks.providers.base import Endpoint, Request
from webhooks.providers.stripe import Stripe


def stored(client: FlaskClient) -> int:
    assert client.application is not None
    return len(rows(client.application, "SELECT 1 FROM events"))


def post(client: FlaskClient, body: bytes, headers: dict[str, str]):  # type: ignore[no-untyped-def]
    return client.post("/webhooks/stripe", data=body, headers=headers)


def test_sdk_signed_event_is_stored(client: FlaskClient) -> None:
    body = stripe_event("evt_sdk")
    response = post(client, body, stripe_headers(body))
    assert response.status_code == 200
    (row,) = rows(client.application, "SELECT endpoint, event_id, event_type, status, payload FROM events")
    assert row[:4] == ("stripe", "evt_sdk", "payment_intent.succeeded", "queued")
    assert bytes(row[4]) == body


def test_duplicate_delivery_gets_200_and_no_second_row(client: FlaskClient) -> None:
    body = stripe_event("evt_dup")
    first = post(client, body, stripe_headers(body))
    second = post(client, body, stripe_headers(body))
    assert (first.status_code, second.status_code) == (200, 200)
    assert first.get_json() == second.get_json()
    assert stored(client) == 1


def _tampered(body: bytes, headers: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    return body.replace(b"succeeded", b"canceled"), headers


def _wrong_secret(body: bytes, headers: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    return body, stripe_headers(body, secret="whsec_not_the_one")


def _stale(body: bytes, headers: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    return body, stripe_headers(body, timestamp=int(time.time()) - 301)


def _v0_only(body: bytes, headers: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    return body, {"Stripe-Signature": headers["Stripe-Signature"].replace("v1=", "v0=")}


def _missing(body: bytes, headers: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    return body, {"Content-Type": "application/json"}


def _not_hex(body: bytes, headers: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    return body, {"Stripe-Signature": headers["Stripe-Signature"].split(",")[0] + ",v1=zz"}


@pytest.mark.parametrize(
    ("break_it", "status", "reason"),
    [
        (_tampered, 400, "signature_mismatch"),
        (_wrong_secret, 400, "signature_mismatch"),
        (_stale, 400, "timestamp_out_of_tolerance"),
        (_v0_only, 400, "missing_signature"),
        (_missing, 400, "missing_signature"),
        (_not_hex, 400, "malformed_signature"),
    ],
)
def test_bad_delivery_is_refused_and_nothing_stored(client: FlaskClient, break_it, status, reason) -> None:  # type: ignore[no-untyped-def]
    body = stripe_event("evt_bad")
    bad_body, bad_headers = break_it(body, stripe_headers(body))
    response = post(client, bad_body, bad_headers)
    assert (response.status_code, response.get_json()) == (status, {"error": reason})
    assert STRIPE_SECRET not in response.get_data(as_text=True)
    assert stored(client) == 0


def test_valid_signature_over_garbage_is_malformed_payload(client: FlaskClient) -> None:
    body = b"not json at all"
    response = post(client, body, stripe_headers(body))
    assert (response.status_code, response.get_json()) == (400, {"error": "malformed_payload"})
    assert stored(client) == 0


def _rolled_header(body: bytes, old: str, new: str) -> dict[str, str]:
    """What Stripe sends during a secret roll: one t=, a v1 per live secret."""
    t = int(time.time())
    v1_old = stripe_headers(body, old, t)["Stripe-Signature"].split("v1=")[1]
    v1_new = stripe_headers(body, new, t)["Stripe-Signature"].split("v1=")[1]
    return {"Stripe-Signature": f"t={t},v1={v1_old},v1={v1_new}"}


@pytest.mark.parametrize("configured", ["whsec_old", "whsec_new"])
def test_two_v1_signatures_accepted_with_either_secret(configured: str) -> None:
    body = stripe_event("evt_roll")
    headers = {k.lower(): v for k, v in _rolled_header(body, "whsec_old", "whsec_new").items()}
    endpoint = Endpoint("stripe", "stripe", (configured,))
    verified = Stripe().verify(Request(headers, body), endpoint, now=time.time())
    assert [e.event_id for e in verified.events] == ["evt_roll"]


def test_rotation_records_which_secret_matched() -> None:
    body = stripe_event("evt_rot")
    endpoint = Endpoint("stripe", "stripe", ("whsec_a", "whsec_b"))
    for index, secret in enumerate(endpoint.secrets):
        headers = {k.lower(): v for k, v in stripe_headers(body, secret).items()}
        verified = Stripe().verify(Request(headers, body), endpoint, now=time.time())
        assert verified.events[0].secret_index == index


def test_vector_s1() -> None:
    body = (
        b'{"id":"evt_test_webhook","object":"event","created":1700000000,"type":"payment_intent.succeeded",'
        b'"data":{"object":{"id":"pi_123","object":"payment_intent"}}}'
    )
    header = "t=1700000000,v1=abffd30d6c3fa1ea01903df2964cc0a3e9105c04a9b74cdf1ca78521dc434a69"
    endpoint = Endpoint("stripe", "stripe", ("whsec_test_secret",))
    verified = Stripe().verify(Request({"stripe-signature": header}, body), endpoint, now=1700000010)
    assert verified.events[0].event_id == "evt_test_webhook"
    with pytest.raises(VerificationError) as info:
        Stripe().verify(Request({"stripe-signature": header}, body + b" "), endpoint, now=1700000010)
    assert info.value.reason == "signature_mismatch"


def test_what_we_sign_the_sdk_accepts() -> None:
    body = stripe_event("evt_ours")
    endpoint = Endpoint("stripe", "stripe", (STRIPE_SECRET,))
    _, headers = Stripe().sign(endpoint, body, now=time.time())
    event = stripe.Webhook.construct_event(body.decode(), headers["Stripe-Signature"], STRIPE_SECRET)
    assert event["id"] == "evt_ours"


def test_thin_event_is_stored_with_related_object(client: FlaskClient) -> None:
    body = json.dumps(
        {
            "id": "evt_thin_1",
            "object": "v2.core.event",
            "type": "v1.billing.meter.error_report_triggered",
            "created": "2024-09-17T06:20:52.246Z",
            "related_object": {"id": "mtr_123", "type": "billing.meter", "url": "/v1/billing/meters/mtr_123"},
        }
    ).encode()
    assert post(client, body, stripe_headers(body)).status_code == 200
    assert rows(client.application, "SELECT event_type FROM events") == [("v1.billing.meter.error_report_triggered",)]
