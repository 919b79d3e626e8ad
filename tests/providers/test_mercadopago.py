"""Mercado Pago: the SDK's ``WebhookSignatureValidator`` as oracle both ways over randomized
notifications, its own test cases (mercadopago/sdk-python tests/test_webhook_signature_validator.py)
as peer vectors, one test per failure rule; the unsigned body is never acted on: the worker acts on
the payment fetched from a fake API on 127.0.0.1, fetched the same way by the SDK's own client.
Through the app: stored once under concurrent duplicates, refusals store nothing, a re-labelled
body is no second event."""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import mercadopago
import pytest
from flask import Flask
from mercadopago.config import Config, RequestOptions
from mercadopago.webhook import InvalidWebhookSignatureError, WebhookSignatureValidator

from tests.conftest import admin_headers, base_config, drain, make_app, rows
from tests.fake_apis import serve
from webhooks.errors import ConfigError, VerificationError
from webhooks.providers import mercadopago_api
from webhooks.providers.api import FetchError, MismatchError
from webhooks.providers.base import Endpoint, Request
from webhooks.providers.mercadopago import TYPE, MercadoPago

PAYLOADS = Path(__file__).parents[1] / "payloads" / "mercadopago"
PROVIDER = MercadoPago()
TOKEN = "TEST-7719417112948541-012318-4f4ee0ce29fd7f3f4f0d3b26e6a2d8c0-724484980"
NOW = 1_742_505_638
ORACLE_EVENTS = 220
URL = "https://hooks.example.com/webhooks/mercadopago"
BODY = (PAYLOADS / "payment.updated__basic.json").read_bytes()
SDK_PAYMENT = json.loads((PAYLOADS / "payment__sdk_payment_get.json").read_text())  # sdk-python tests/resources/mocks


def endpoint(*secrets: str, name: str = "mercadopago", **options: Any) -> Endpoint:
    return Endpoint(
        name, "mercadopago", secrets or ("your_secret_key_here",), options={"access_token": TOKEN, **options}
    )


def signed(body: bytes = BODY, *, now: int = NOW, secret: str = "your_secret_key_here") -> Request:
    url = PROVIDER.post_url(URL, body)
    _, headers = PROVIDER.sign(endpoint(secret), body, now=now, url=url)
    return Request({k.lower(): v for k, v in headers.items()}, body, url)


def reason(request: Request, ep: Endpoint | None = None) -> str:
    try:
        PROVIDER.verify(request, ep or endpoint(), now=NOW)
    except VerificationError as exc:
        return str(exc.reason)
    return "ok"


def notification(data_id: str, topic: str = "payment") -> bytes:
    return json.dumps({"action": "payment.updated", "data": {"id": data_id}, "id": 1, "type": topic}).encode()


# -- the SDK's own test cases as peer vectors --------------------------------------------------------

SDK_SECRET, SDK_REQUEST_ID, SDK_TS = "your_secret_key_here", "2066ca19-c6f1-498a-be75-1923005edd06", "1742505638683"


def sdk_hash(data_id: str, request_id: str, ts: str, secret: str = SDK_SECRET) -> str:
    """compute_hash of the SDK's test module, with both optional pairs present."""
    manifest = f"id:{data_id};request-id:{request_id};ts:{ts};"
    return hmac.new(secret.encode(), manifest.encode(), hashlib.sha256).hexdigest()


def sdk_request(data_id: str, header: str, request_id: str = SDK_REQUEST_ID) -> Request:
    body = notification(data_id, "payment")
    return Request({"x-signature": header, "x-request-id": request_id}, body, f"{URL}?data.id={data_id}&type=payment")


@pytest.mark.parametrize("data_id", ["ord01jq4s4ky8hwq6na5pxb65b3d3", "ORD01JQ4S4KY8HWQ6NA5PXB65B3D3", "ord01abc123"])
def test_sdk_cases_happy_path_uppercase_preserved_other_topics(data_id: str) -> None:
    """Cases 1, 2 and 12: the data.id is signed exactly as received (ts in ms)."""
    header = f"ts={SDK_TS},v1={sdk_hash(data_id, SDK_REQUEST_ID, SDK_TS)}"
    WebhookSignatureValidator.validate(header, SDK_REQUEST_ID, data_id, SDK_SECRET)
    (event,) = PROVIDER.verify(sdk_request(data_id, header), endpoint(), now=NOW).events
    assert (event.event_id, event.event_type, event.object_id) == (f"{data_id}:{SDK_REQUEST_ID}", TYPE, data_id)
    assert event.signed_at == NOW  # 13 digits: milliseconds


@pytest.mark.parametrize(
    ("header", "ours"),
    [
        ("this-is-garbage", "malformed_signature"),  # case 3
        (f"v1={sdk_hash('ord01abc123', SDK_REQUEST_ID, SDK_TS)}", "malformed_signature"),  # case 5: no ts
        (f"ts={SDK_TS}", "missing_signature"),  # case 6: no v1
        (f"ts={SDK_TS},v1={'00' * 32}", "signature_mismatch"),  # case 7: tampered hash
        (f"ts={SDK_TS},v2=somehash", "missing_signature"),  # only v2
    ],
)
def test_sdk_refusal_cases(header: str, ours: str) -> None:
    with pytest.raises(InvalidWebhookSignatureError):
        WebhookSignatureValidator.validate(header, SDK_REQUEST_ID, "ord01abc123", SDK_SECRET)
    assert reason(sdk_request("ord01abc123", header)) == ours


def test_sdk_case_stale_timestamp_and_the_missing_request_id() -> None:
    stale = str(NOW - 30 * 60)  # case 8: 30 minutes ago, in seconds
    header = f"ts={stale},v1={sdk_hash('ord01abc123', SDK_REQUEST_ID, stale)}"
    with pytest.raises(InvalidWebhookSignatureError):
        WebhookSignatureValidator.validate(
            header, SDK_REQUEST_ID, "ord01abc123", SDK_SECRET, tolerance_seconds=300, now=lambda: NOW * 1000
        )
    assert reason(sdk_request("ord01abc123", header)) == "timestamp_out_of_tolerance"
    # Case 10 (no x-request-id) verifies in the SDK; here it is refused: nothing unique would be signed.
    header = f"ts={SDK_TS},v1={sdk_hash('ord01abc123', SDK_REQUEST_ID, SDK_TS)}"
    request = sdk_request("ord01abc123", header)
    assert reason(Request({"x-signature": header}, request.body, request.url)) == "missing_signature"


# -- the SDK's validator as oracle, both ways ---------------------------------------------------------


def test_sdk_validator_oracle_both_ways_over_randomized_notifications() -> None:
    rng = random.Random(5)
    disagreements = 0
    for _ in range(ORACLE_EVENTS):
        secret = "".join(rng.choices("0123456789abcdef", k=64))
        data_id = str(rng.randrange(1, 10**12))
        now = rng.randrange(1_600_000_000, 1_900_000_000)
        body = notification(data_id)
        request = signed(body, now=now, secret=secret)
        try:  # our sign → the SDK accepts
            WebhookSignatureValidator.validate(
                request.headers["x-signature"],
                request.headers["x-request-id"],
                data_id,
                secret,
                tolerance_seconds=300,
                now=lambda now=now: now * 1000,
            )
        except InvalidWebhookSignatureError:
            disagreements += 1
        # the SDK's own manifest (its test module's compute_hash) → we accept
        request_id = f"{rng.getrandbits(128):032x}"
        ts = str(now * 1000 if rng.random() < 0.5 else now)
        header = f"ts={ts},v1={sdk_hash(data_id, request_id, ts, secret)}"
        WebhookSignatureValidator.validate(header, request_id, data_id, secret)
        theirs = Request({"x-signature": header, "x-request-id": request_id}, body, request.url)
        try:
            PROVIDER.verify(theirs, endpoint(secret), now=now)
        except VerificationError:
            disagreements += 1
    assert disagreements == 0


# -- what the signature does not cover is never a second event or an action -------------------------


def test_the_unsigned_body_cannot_name_another_payment_or_topic() -> None:
    request = signed()
    assert reason(request) == "ok"
    other = BODY.replace(b'"17014025134"', b'"99999999999"')
    assert reason(Request(request.headers, other, request.url)) == "malformed_payload"  # the query's id differs
    query_less = request.url.split("?")[0]
    assert reason(Request(request.headers, other, query_less)) == "signature_mismatch"  # the signed id is the body's
    for topic in (b'"merchant_order"', b'"subscription_preapproval"'):
        assert reason(Request(request.headers, BODY.replace(b'"payment"', topic), query_less)) == "malformed_payload"
    relabelled = BODY.replace(b"payment.updated", b"payment.created").replace(b"114862331217", b"1")
    again = PROVIDER.verify(Request(request.headers, relabelled, request.url), endpoint(), now=NOW).events
    assert again == PROVIDER.verify(request, endpoint(), now=NOW).events  # same event: a duplicate


def test_failures_name_their_reason() -> None:
    request = signed()
    assert reason(request, endpoint("other")) == "signature_mismatch"
    assert reason(Request({"x-request-id": "r"}, BODY, request.url)) == "missing_signature"
    assert reason(signed(now=NOW - 301)) == "timestamp_out_of_tolerance"
    assert reason(signed(now=NOW + 301)) == "timestamp_out_of_tolerance"
    assert reason(Request({**request.headers, "x-request-id": "other"}, BODY, request.url)) == "signature_mismatch"
    rotated = PROVIDER.verify(request, endpoint("old", "your_secret_key_here"), now=NOW)
    assert rotated.events[0].secret_index == 1


def test_start_up_fails_closed() -> None:
    with pytest.raises(ConfigError, match="access_token"):
        PROVIDER.validate(Endpoint("m", "mercadopago", ("s",)))
    with pytest.raises(ConfigError, match="access_token"):
        PROVIDER.validate(endpoint(access_token="sk_live_nope"))
    with pytest.raises(ConfigError, match="no secret"):
        PROVIDER.validate(Endpoint("m", "mercadopago", (), options={"access_token": TOKEN}))
    with pytest.raises(ConfigError, match="api_base"):
        PROVIDER.validate(endpoint(api_base="https://api.mercadopago.com.example"))
    PROVIDER.validate(endpoint(api_base="http://127.0.0.1:1"))
    PROVIDER.validate(endpoint(api_base="https://api.mercadopago.com"))


# -- the fetch: ours and the SDK's, from the same fake ------------------------------------------------


class FakeMercadoPago:
    def __init__(self) -> None:
        self.payments: dict[str, dict[str, Any]] = {}
        self.seen: list[tuple[str, str | None]] = []
        self.status = 200
        self.lock = threading.Lock()

    def route(self, method: str, path: str, query: Any, headers: Any, body: bytes) -> tuple[int, Any]:
        with self.lock:
            self.seen.append((path, headers.get("Authorization")))
        if self.status != 200:
            return self.status, {"message": "error", "status": self.status}
        found = self.payments.get(path.removeprefix("/v1/payments/"))
        return (200, found) if found else (404, {"message": "Payment not found", "status": 404})


@pytest.fixture
def fake() -> Iterator[tuple[FakeMercadoPago, str]]:
    api = FakeMercadoPago()
    with serve(api.route) as base:
        yield api, base


def test_our_fetch_and_the_sdks_agree_over_randomized_payments(
    fake: tuple[FakeMercadoPago, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    api, base = fake
    # The SDK has no base URL option: its Config's (read-only) property is pointed at the fake.
    monkeypatch.setattr(Config, "api_base_url", property(lambda self: base))
    sdk = mercadopago.SDK(TOKEN)
    rng = random.Random(9)
    disagreements = 0
    for n in range(ORACLE_EVENTS):
        payment = (
            SDK_PAYMENT
            if n == 0
            else {
                **SDK_PAYMENT,
                "id": rng.randrange(1, 10**12),
                "status": rng.choice(["approved", "pending", "rejected", "refunded"]),
                "transaction_amount": rng.randrange(1, 10**6) / 100,
            }
        )
        api.payments = {str(payment["id"]): payment}
        api.seen.clear()
        ours = mercadopago_api.payment(endpoint(name=f"mp-oracle-{n}", api_base=base), str(payment["id"]))
        theirs = sdk.payment().get(payment["id"], RequestOptions(access_token=TOKEN))["response"]
        same_request = api.seen[0][0] == api.seen[1][0] == f"/v1/payments/{payment['id']}"
        disagreements += not (
            ours == theirs == payment and same_request and api.seen[0][1] == api.seen[1][1] == f"Bearer {TOKEN}"
        )
    assert disagreements == 0


def test_refetch_acts_only_on_mercado_pagos_copy(fake: tuple[FakeMercadoPago, str]) -> None:
    api, base = fake
    api.payments = {str(SDK_PAYMENT["id"]): SDK_PAYMENT}
    ep = endpoint(name="mp-refetch", api_base=base)
    data, ref = PROVIDER.refetch(ep, TYPE, json.loads(BODY), None)
    assert data == SDK_PAYMENT and ref is not None and (ref.type, ref.id) == ("payment", "17014025134")
    assert (PROVIDER.describe_version(ref.version) or "").startswith("fetched from Mercado Pago 20")
    with pytest.raises(MismatchError, match="no payment"):
        PROVIDER.refetch(ep, TYPE, json.loads(notification("123")), None)
    api.payments = {"5": SDK_PAYMENT}
    with pytest.raises(MismatchError, match="not that payment"):
        mercadopago_api.payment(ep, "5")
    api.status = 429
    with pytest.raises(FetchError, match="429"):
        mercadopago_api.payment(ep, "5")


# -- through the app ----------------------------------------------------------------------------------


@pytest.fixture
def mp_app(sqlite_url: str, fake: tuple[FakeMercadoPago, str]) -> tuple[Flask, FakeMercadoPago]:
    api, base = fake
    api.payments = {str(SDK_PAYMENT["id"]): SDK_PAYMENT}
    mp = {
        "provider": "mercadopago",
        "secrets": ["your_secret_key_here"],
        "access_token": "env:MP_TOKEN",
        "api_base": base,
    }
    config = base_config(sqlite_url, MP_TOKEN=TOKEN, WEBHOOKS_MAX_ATTEMPTS="2", ENDPOINTS={"mercadopago": mp})
    return make_app(config), api


def post(app: Flask, request: Request) -> tuple[int, Any]:
    path = request.url.removeprefix("https://hooks.example.com")
    response = app.test_client().post(path, data=request.body, headers=dict(request.headers))
    return response.status_code, response.get_json()


def events(app: Flask) -> list[tuple[str, str, str | None]]:
    return [tuple(r) for r in rows(app, "SELECT event_id, status, last_error FROM events")]


def now_signed(body: bytes = BODY) -> Request:
    import time

    return signed(body, now=int(time.time()))


def test_stored_once_and_processed_from_the_fetched_payment(mp_app: tuple[Flask, FakeMercadoPago]) -> None:
    app, api = mp_app
    request = now_signed()
    with ThreadPoolExecutor(10) as pool:
        assert list(pool.map(lambda _: post(app, request)[0], range(10))) == [200] * 10
    assert api.seen == []  # nothing is fetched on the request path
    drain(app)
    ((event_id, status, _),) = events(app)
    assert event_id == f"17014025134:{request.headers['x-request-id']}" and status in ("processed", "ignored")
    assert api.seen == [("/v1/payments/17014025134", f"Bearer {TOKEN}")]
    obj = app.test_client().get("/admin/api/objects/mercadopago/payment/17014025134", headers=admin_headers())
    assert obj.get_json()["state"] == SDK_PAYMENT


def test_refusals_store_nothing_and_a_relabel_is_a_duplicate(mp_app: tuple[Flask, FakeMercadoPago]) -> None:
    app, _ = mp_app
    request = now_signed()
    assert post(app, Request({**request.headers, "x-request-id": "minted"}, request.body, request.url)) == (
        400,
        {"error": "signature_mismatch"},
    )
    stale = signed(now=NOW)
    assert post(app, stale) == (400, {"error": "timestamp_out_of_tolerance"})
    assert post(app, Request({}, request.body, request.url)) == (400, {"error": "missing_signature"})
    assert events(app) == []
    assert post(app, request)[0] == 200
    relabelled = request.body.replace(b"payment.updated", b"payment.created").replace(b"114862331217", b"2")
    assert post(app, Request({**request.headers, "user-agent": "x"}, relabelled, request.url))[0] == 200
    assert len(events(app)) == 1


def test_a_payment_mercado_pago_does_not_have_fails_at_once(mp_app: tuple[Flask, FakeMercadoPago]) -> None:
    app, api = mp_app
    assert post(app, now_signed(notification("424242")))[0] == 200
    drain(app)
    ((_, status, error),) = events(app)
    assert status == "failed" and "no payment" in str(error) and len(api.seen) == 1


@pytest.mark.parametrize("name", ["payment.updated__basic.json", "payment.created__docs.json"])
def test_payload_files_verify_as_one_payment_event(name: str) -> None:
    body = (PAYLOADS / name).read_bytes()
    (event,) = PROVIDER.verify(signed(body), endpoint(), now=NOW).events
    assert event.object_id == json.loads(body)["data"]["id"] and event.event_type == TYPE
