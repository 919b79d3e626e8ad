"""Adyen through the receiver: official vectors, SDK-signed batches, all-or-nothing, basic auth."""

from __future__ import annotations

import base64
import copy
import itertools
import json
from typing import Any

import Adyen.util
import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.conftest import ADYEN_KEY, admin_headers, adyen_body, adyen_item, base_config, drain, make_app, rows
from webhooks.errors import VerificationError
from webhooks.providers.adyen import SIGNED_FIELDS, signed_string
from webhooks.providers.adyen import Adyen as AdyenProvider
from webhooks.providers.base import Endpoint, Request

ENDPOINT = Endpoint("adyen", "adyen", (ADYEN_KEY,))
A2_KEY = "74F490DD33F7327BAECC88B2947C011FC02D014A473AAA33A8EC93E4DC069174"
# Vector A2: the signed fields of Adyen's own special-character notifications
# (adyen-python-api-library test/mocks/util/*_notification.json).
A2 = [
    (
        "T7FD4VM4D3RZNN82",
        "\\\\slashes are fun",
        "2023-01-09T16:27:29+01:00",
        "nIgT81gaB5oJpn2jPXupDq68iRo2wUlBsuYjtYfwKqo=",
    ),
    (
        "M8NB66SBZSGLNK82",
        ":slashes are fun",
        "2023-01-10T13:40:54+01:00",
        "2EQYm7YJpKO4EtHSPu55SQTyWf8dkW5u2nD1tJFpViA=",
    ),
    (
        "X3GWNS6KJ8NKGK82",
        "//slashes are fun",
        "2023-01-10T13:37:30+01:00",
        "9Z0xdpG9Xi3zcmXv14t/BvMBut77O/Xq9D4CQXSDUi4=",
    ),
]


def verify(body: bytes, endpoint: Endpoint = ENDPOINT, **headers: str):  # type: ignore[no-untyped-def]
    return AdyenProvider().verify(Request({k.lower(): v for k, v in headers.items()}, body), endpoint, now=0)


def test_vector_a1() -> None:
    item = {
        "pspReference": "7914073381342284",
        "merchantAccountCode": "TestMerchant",
        "merchantReference": "TestPayment-1407325143704",
        "amount": {"value": 1130, "currency": "EUR"},
        "eventCode": "AUTHORISATION",
        "success": "true",
        "additionalData": {"hmacSignature": "coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0="},
    }
    assert (
        signed_string(item) == b"7914073381342284::TestMerchant:TestPayment-1407325143704:1130:EUR:AUTHORISATION:true"
    )
    verified = verify(adyen_body(item))
    assert [e.event_id for e in verified.events] == ["7914073381342284:AUTHORISATION:true"]


@pytest.mark.parametrize(("psp", "reference", "date", "signature"), A2)
def test_vector_a2_special_characters_are_not_escaped(psp: str, reference: str, date: str, signature: str) -> None:
    item = {
        "pspReference": psp,
        "merchantAccountCode": "AntoniStroinski",
        "merchantReference": reference,
        "amount": {"value": 1000, "currency": "EUR"},
        "eventCode": "AUTHORISATION",
        "eventDate": date,
        "success": "true",
        "additionalData": {"hmacSignature": signature},
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
    item = {
        "additionalData": {},
        "amount": {"currency": "EUR", "value": 1},
        "eventCode": "CAPTURE",
        "pspReference": "P1",
        "success": "true",
        "merchantAccountCode": "M",
        "merchantReference": "R",
    }
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


@pytest.mark.parametrize(
    "headers", [{}, basic("adyen-user:wrong"), basic("other:s3cret"), {"Authorization": "Basic %%%"}]
)
def test_wrong_basic_auth_is_refused(auth_app: Flask, headers: dict[str, str]) -> None:
    response = auth_app.test_client().post("/webhooks/adyen", data=adyen_body(adyen_item()), headers=headers)
    assert (response.status_code, response.get_json()) == (401, {"error": "bad_basic_auth"})
    assert rows(auth_app, "SELECT 1 FROM events") == []


def test_right_basic_auth_is_accepted_and_redacted(auth_app: Flask) -> None:
    response = auth_app.test_client().post(
        "/webhooks/adyen", data=adyen_body(adyen_item()), headers=basic("adyen-user:s3cret")
    )
    assert response.data == b"[accepted]"
    ((headers,),) = rows(auth_app, "SELECT headers FROM events")
    assert "s3cret" not in str(headers) and "[redacted]" in str(headers)


# -- hostile senders II: one signature, one item (findings 4 and 5) ----------------------------

SPLIT_FIELDS = (*SIGNED_FIELDS, "value", "currency", "eventCode", "success")


def resplits(item: dict[str, Any]) -> list[dict[str, Any]]:
    """Every other item whose signed string is ``item``'s, so its hmacSignature verifies it too:
    the string cut at other ``:`` (integers kept integers, so only the split tells them apart)."""
    signed = signed_string(item)
    tokens = signed.decode().split(":")
    variants = []
    for cuts in itertools.combinations(range(1, len(tokens)), len(SPLIT_FIELDS) - 1):
        bounds = [0, *cuts, len(tokens)]
        parts = dict(zip(SPLIT_FIELDS, (":".join(tokens[a:b]) for a, b in itertools.pairwise(bounds)), strict=True))
        value = parts.pop("value")
        variant = copy.deepcopy(item) | parts
        variant["amount"] = {"value": int(value) if value.isdigit() else value, "currency": parts.pop("currency")}
        variant.pop("currency")
        assert signed_string(variant) == signed
        if variant != item:
            variants.append(variant)
    return variants


def test_a_resplit_signed_string_never_yields_another_event(any_app: Flask) -> None:
    """Finding 4: the fields are joined by ``:`` unescaped; a captured notification whose
    merchantReference holds ``:`` re-cut elsewhere (``PSPX:`` as pspReference, another merchant
    account, …) carries a signature that still verifies. Delivered before the genuine one, none
    may be stored: one signature is one event, on its own account."""
    genuine = adyen_item("PSPX", reference="order:42:b")
    variants = resplits(genuine)
    assert len(variants) == 35 and any(v["pspReference"] == "PSPX:" for v in variants)
    assert any(v["merchantAccountCode"] != "TestMerchant" and v["pspReference"] == "PSPX" for v in variants)
    client = any_app.test_client()
    for variant in variants:
        assert Adyen.util.is_valid_hmac_notification(variant, ADYEN_KEY)  # the attack is real
        response = client.post("/webhooks/adyen", data=adyen_body(variant), content_type="application/json")
        assert (response.status_code, response.get_json()) == (400, {"error": "malformed_payload"}), variant
    response = client.post("/webhooks/adyen", data=adyen_body(genuine), content_type="application/json")
    assert (response.status_code, response.data) == (200, b"[accepted]")
    ((event_id, payload),) = rows(any_app, "SELECT event_id, payload FROM events")
    stored = json.loads(bytes(payload))["notificationItems"][0]["NotificationRequestItem"]  # a batch of one
    assert (event_id, stored["merchantAccountCode"], stored["merchantReference"]) == (
        "PSPX:AUTHORISATION:true",
        "TestMerchant",
        "order:42:b",
    )


def test_a_retyped_amount_is_refused_and_the_genuine_one_folds(any_app: Flask) -> None:
    """Finding 5: ``"value": "1130"`` signs as ``1130`` does. The re-typed copy, delivered first,
    is refused (``malformed_payload``: Adyen sends integers, and a handler reading the stored item
    must see one); the genuine copy is stored and folds to its amount."""
    genuine = adyen_item("PSPT", value=1130)
    retyped = copy.deepcopy(genuine)
    retyped["amount"]["value"] = "1130"
    assert signed_string(retyped) == signed_string(genuine)
    client = any_app.test_client()
    response = client.post("/webhooks/adyen", data=adyen_body(retyped), content_type="application/json")
    assert (response.status_code, response.get_json()) == (400, {"error": "malformed_payload"})
    assert client.post("/webhooks/adyen", data=adyen_body(genuine)).data == b"[accepted]"
    drain(any_app)
    got = client.get("/admin/api/objects/adyen/payment/PSPT", headers=admin_headers())
    assert (got.get_json()["state"]["authorised"], got.get_json()["state"]["status"]) == (1130, "authorised")


def test_a_string_amount_stored_before_the_refusal_folds_as_its_number() -> None:
    """Rows kept from before ``check_shape`` may hold ``"1130"``: the fold reads it as 1130, not 0."""
    item = adyen_item("PSPOLD", value=1130)
    item["amount"]["value"] = "1130"
    ref = AdyenProvider().extract("AUTHORISATION", item)
    assert ref is not None and ref.state["authorised"] == 1130


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("pspReference", "PSP:1"),
        ("pspReference", 7914073381342284),
        ("originalReference", "A:B"),
        ("merchantAccountCode", "Test:Merchant"),
        ("eventCode", "authorisation"),
        ("eventCode", "AUTH:X"),
        ("success", True),
        ("success", "yes"),
        ("merchantReference", 42),
        ("amount", [1130, "EUR"]),
        ("amount", {"value": 1130.0, "currency": "EUR"}),
        ("amount", {"value": True, "currency": "EUR"}),
        ("amount", {"value": 1130, "currency": "E:R"}),
    ],
)
def test_genuinely_signed_fields_adyen_never_sends_are_malformed(field: str, value: Any) -> None:
    """Each shape ``check_shape`` refuses, signed as its fields read (the SDK would sign ``True``
    as ``True``: our signer, which agrees with the SDK on every string, signs it ``true``)."""
    item = adyen_item("PSPS")
    item[field] = value
    body, _ = AdyenProvider().sign(ENDPOINT, adyen_body(item), now=0)
    with pytest.raises(VerificationError) as info:
        verify(body)
    assert info.value.reason == "malformed_payload"
