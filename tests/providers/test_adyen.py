"""Adyen through the receiver: official vectors, SDK-signed batches, all-or-nothing, basic auth."""

from __future__ import annotations

import base64
import json

import Adyen.util
import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.conftest import ADYEN_KEY, adyen_body, adyen_item, base_config, make_app, rows
from webhooks.errors import VerificationError
from webhooks.providers.adyen import Adyen as AdyenProvider
from webhooks.providers.adyen import signed_string
from webhooks.providers.base import Endpoint, Request

ENDPOINT = Endpoint("adyen", "adyen", (ADYEN_KEY,))
A2_KEY = "74F490DD33F7327BAECC88B2947C011FC02D014A473AAA33A8EC93E4DC069174"
# Vector A2: the signed fields of Adyen's own special-character notifications
# (adyen-python-api-library test/mocks/util/*_notification.json).
A2 = [
    ("T7FD4VM4D3RZNN82", "\\\\slashes are fun", "2023-01-09T16:27:29+01:00", "nIgT81gaB5oJpn2jPXupDq68iRo2wUlBsuYjtYfwKqo="),
    ("M8NB66SBZSGLNK82", ":slashes are fun", "2023-01-10T13:40:54+01:00", "2EQYm7YJpKO4EtHSPu55SQTyWf8dkW5u2nD1tJFpViA="),
    ("X3GWNS6KJ8NKGK82", "//slashes are fun", "2023-01-10T13:37:30+01:00", "9Z0xdpG9Xi3zcmXv14t/BvMBut77O/Xq9D4CQXSDUi4="),
]


def verify(body: bytes, endpoint: Endpoint = ENDPOINT, **headers: str):  # type: ignore[no-untyped-def]
    return AdyenProvider().verify(Request({k.lower(): v for k, v in headers.items()}, body), endpoint, now=0)


def test_vector_a1() -> None:
    item = {
        "pspReference": "7914073381342284", "merchantAccountCode": "TestMerchant",
        "merchantReference": "TestPayment-1407325143704", "amount": {"value": 1130, "currency": "EUR"},
        "eventCode": "AUTHORISATION", "success": "true",
        "additionalData": {"hmacSignature": "coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0="},
    }
    assert signed_string(item) == b"7914073381342284::TestMerchant:TestPayment-1407325143704:1130:EUR:AUTHORISATION:true"
    verified = verify(adyen_body(item))
    assert [e.event_id for e in verified.events] == ["7914073381342284:AUTHORISATION:true"]


@pytest.mark.parametrize(("psp", "reference", "date", "signature"), A2)
def test_vector_a2_special_characters_are_not_escaped(psp: str, reference: str, date: str, signature: str) -> None:
    item = {
        "pspReference": psp, "merchantAccountCode": "AntoniStroinski", "merchantReference": reference,
        "amount": {"value": 1000, "currency": "EUR"}, "eventCode": "AUTHORISATION", "eventDate": date,
        "success": "true", "additionalData": {"hmacSignature": signature},
    }
    assert verify(adyen_body(item), Endpoint("adyen", "adyen", (A2_KEY,))).events[0].event_id.startswith(psp)


def test_vector_a4_platform_webhook_header() -> None:
    body = b'{"type":"balancePlatform.accountHolder.created","environment":"test"}'
    verified = verify(body, HmacSignature="ju1jtnTPOnC/SQBjUbNuKbdiRAolm+XWkpBTQ6g3uNA=")
    assert verified.events[0].event_type == "balancePlatform.accountHolder.created"
    with pytest.raises(VerificationError) as info:
        verify(body + b" ", HmacSignature="ju1jtnTPOnC/SQBjUbNuKbdiRAolm+XWkpBTQ6g3uNA=")
    assert info.value.reason == "signature_mismatch"


def test_what_we_sign_the_sdk_accepts() -> None:
    body = adyen_body(adyen_item())
    item = {"additionalData": {}, "amount": {"currency": "EUR", "value": 1}, "eventCode": "CAPTURE",
            "pspReference": "P1", "success": "true", "merchantAccountCode": "M", "merchantReference": "R"}
    signed, _ = AdyenProvider().sign(ENDPOINT, adyen_body(item), now=0)
    ours = json.loads(signed)["notificationItems"][0]["NotificationRequestItem"]
    assert Adyen.util.is_valid_hmac_notification(ours, ADYEN_KEY)
    _, headers = AdyenProvider().sign(ENDPOINT, b'{"type":"x"}', now=0)
    assert Adyen.util.is_valid_hmac_payload(headers["HmacSignature"], ADYEN_KEY, b'{"type":"x"}')
    assert verify(body).events


def test_sdk_signed_batch_is_stored_one_row_per_item(client: FlaskClient) -> None:
    body = adyen_body(adyen_item("PSP1"), adyen_item("PSP2", code="CAPTURE", original="PSP1"))
    response = client.post("/webhooks/adyen", data=body, content_type="application/json")
    assert (response.status_code, response.data) == (200, b"[accepted]")
    got = rows(client.application, "SELECT event_id, event_type, item_index FROM events ORDER BY item_index")
    assert got == [("PSP1:AUTHORISATION:true", "AUTHORISATION", 0), ("PSP2:CAPTURE:true", "CAPTURE", 1)]


def test_duplicate_batch_answers_accepted_again(client: FlaskClient) -> None:
    body = adyen_body(adyen_item("PSP1"))
    for _ in range(2):
        response = client.post("/webhooks/adyen", data=body)
        assert (response.status_code, response.data) == (200, b"[accepted]")
    assert len(rows(client.application, "SELECT 1 FROM events")) == 1


def test_batch_with_one_bad_item_stores_nothing(client: FlaskClient) -> None:
    bad = adyen_item("PSP2")
    bad["amount"]["value"] = 999999  # tampered after signing
    response = client.post("/webhooks/adyen", data=adyen_body(adyen_item("PSP1"), bad))
    assert (response.status_code, response.get_json()) == (400, {"error": "signature_mismatch"})
    assert rows(client.application, "SELECT 1 FROM events") == []


def test_item_without_signature_is_refused(client: FlaskClient) -> None:
    item = adyen_item("PSP1")
    del item["additionalData"]["hmacSignature"]
    response = client.post("/webhooks/adyen", data=adyen_body(item))
    assert (response.status_code, response.get_json()) == (400, {"error": "missing_signature"})
    assert rows(client.application, "SELECT 1 FROM events") == []


@pytest.fixture
def auth_app(sqlite_url: str) -> Flask:
    config = base_config(sqlite_url)
    config["ENDPOINTS"]["adyen"]["basic_auth"] = "adyen-user:s3cret"
    return make_app(config)


def basic(credentials: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(credentials.encode()).decode()}


@pytest.mark.parametrize("headers", [{}, basic("adyen-user:wrong"), basic("other:s3cret"), {"Authorization": "Basic %%%"}])
def test_wrong_basic_auth_is_refused(auth_app: Flask, headers: dict[str, str]) -> None:
    response = auth_app.test_client().post("/webhooks/adyen", data=adyen_body(adyen_item()), headers=headers)
    assert (response.status_code, response.get_json()) == (401, {"error": "bad_basic_auth"})
    assert rows(auth_app, "SELECT 1 FROM events") == []


def test_right_basic_auth_is_accepted_and_redacted(auth_app: Flask) -> None:
    response = auth_app.test_client().post(
        "/webhooks/adyen", data=adyen_body(adyen_item()), headers=basic("adyen-user:s3cret")
    )
    assert response.data == b"[accepted]"
    ((headers,),) = rows(auth_app, "SELECT headers FROM bodies")
    assert "s3cret" not in str(headers) and "[redacted]" in str(headers)
