"""Issue #11: handlers act on the object as it is now (Stripe re-fetch, PayPal's own copy), and an
Adyen payment's state is the fold of its notifications, whatever their arrival order."""

from __future__ import annotations

import itertools
import json
import time
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask

from tests import state_handlers
from tests.conftest import admin_headers, adyen_body, adyen_item, base_config, drain, make_app, rows, stripe_headers
from tests.fake_apis import serve
from tests.support.catalogue import endpoints
from tests.support.crc32 import PAD, crc_twin
from webhooks import providers
from webhooks.providers import stripe_api

STEPS = ["requires_payment_method", "requires_confirmation", "processing", "requires_capture", "succeeded"]
TYPES = [
    "payment_intent.created",
    "payment_intent.requires_action",
    "payment_intent.processing",
    "payment_intent.amount_capturable_updated",
    "payment_intent.succeeded",
]


def backend_config(request: pytest.FixtureRequest, **extra: Any) -> dict[str, Any]:
    if request.param == "sqlite":
        config = base_config(request.getfixturevalue("sqlite_url"), **extra)
    else:
        config = base_config(request.getfixturevalue("pg_url"), REDIS_URL=request.getfixturevalue("redis_url"), **extra)
    config["WEBHOOKS_HANDLERS"] = "tests.state_handlers"
    state_handlers.reset()
    return config


@pytest.fixture(autouse=True)
def fast_api(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stripe_api, "API_RATE", 100_000.0)  # the limiter itself is not under test here


# -- Stripe: every event re-fetched ---------------------------------------------------------------

SERVER: dict[str, dict[str, Any]] = {}


def fake_stripe(method: str, path: str, query: Any, headers: Any, body: bytes) -> tuple[int, Any]:
    if headers.get("Authorization") != "Bearer sk_test_state":
        return 401, {"error": {"type": "invalid_request_error", "message": "bad key"}}
    object_id = path.rpartition("/")[2]
    if path.startswith("/v1/payment_intents/") and object_id in SERVER:
        return 200, SERVER[object_id]
    return 404, {"error": {"type": "invalid_request_error", "message": "No such payment_intent"}}


@pytest.fixture(params=["sqlite", "postgres"])
def refetching(request: pytest.FixtureRequest) -> Iterator[Flask]:
    SERVER.clear()
    with serve(fake_stripe) as base:
        config = backend_config(request, STRIPE_API_KEY_TEST="sk_test_state")
        config["ENDPOINTS"]["stripe"].update(api_key="env:STRIPE_API_KEY_TEST", api_base=base, refetch=True)
        yield make_app(config)


def post(app: Flask, path: str, body: bytes, headers: dict[str, str]) -> int:
    return app.test_client().post(path, data=body, headers=headers).status_code


@pytest.mark.slow  # hundreds of deliveries, each drained: the full suite only
def test_every_order_of_five_events_sees_the_servers_current_state(refetching: Flask) -> None:
    created = int(time.time()) - 3600
    orders = list(itertools.permutations(range(5)))
    objects = [f"pi_order{n}" for n in range(len(orders))]
    for step in range(5):
        for obj in objects:  # the server's state moves on, whatever the webhooks say
            SERVER[obj] = {"id": obj, "object": "payment_intent", "status": STEPS[step], "amount_received": 100 * step}
        for obj, order in zip(objects, orders, strict=True):
            sent = order[step]
            snapshot = {"id": obj, "object": "payment_intent", "status": STEPS[sent], "amount_received": -1}
            event = {
                "id": f"evt_{obj}_{sent}",
                "object": "event",
                "created": created + sent,
                "type": TYPES[sent],
                "data": {"object": snapshot},
            }
            body = json.dumps(event).encode()
            assert post(refetching, "/webhooks/stripe", body, stripe_headers(body)) == 200
        drain(refetching)
        seen = {c["data"]["data"]["object"]["id"]: c["state"] for c in state_handlers.CALLS[-len(objects) :]}
        assert len(state_handlers.CALLS) == len(objects) * (step + 1)
        assert seen == {obj: SERVER[obj] for obj in objects}  # each handler saw the state as it is now
    stored = dict(rows(refetching, "SELECT object_id, state FROM objects WHERE object_type = 'payment_intent'"))
    assert {k: json.loads(v) if isinstance(v, str) else v for k, v in stored.items()} == SERVER
    assert rows(refetching, "SELECT DISTINCT status FROM events") == [("processed",)]


def test_deleted_object_is_stored_as_deleted(refetching: Flask) -> None:
    event = {
        "id": "evt_gone",
        "object": "event",
        "created": int(time.time()) - 60,
        "type": "payment_intent.canceled",
        "data": {"object": {"id": "pi_gone", "object": "payment_intent", "status": "canceled"}},
    }
    body = json.dumps(event).encode()
    assert post(refetching, "/webhooks/stripe", body, stripe_headers(body)) == 200
    drain(refetching)
    assert state_handlers.CALLS[-1]["state"] == {"id": "pi_gone", "object": "payment_intent", "deleted": True}


# -- Adyen: the payment fold ----------------------------------------------------------------------


def notifications(prefix: str) -> list[dict[str, Any]]:
    payment = f"{prefix}PAY"
    return [
        dict(psp=payment, code="AUTHORISATION", event_date="2024-01-01T10:00:00+01:00", value=1130),
        dict(psp=f"{prefix}CAP", code="CAPTURE", original=payment, event_date="2024-01-01T10:05:00+01:00", value=1130),
        dict(psp=f"{prefix}REF1", code="REFUND", original=payment, event_date="2024-01-02T09:00:00+01:00", value=300),
        dict(psp=f"{prefix}REF2", code="REFUND", original=payment, event_date="2024-01-01T08:00:00+01:00", value=830),
    ]


@pytest.fixture(params=["sqlite", "postgres"])
def adyen_app(request: pytest.FixtureRequest) -> Flask:
    return make_app(backend_config(request))


def payment(app: Flask, psp: str) -> dict[str, Any]:
    got = app.test_client().get(f"/admin/api/objects/adyen/payment/{psp}", headers=admin_headers())
    assert got.status_code == 200
    return dict(got.get_json())


@pytest.mark.slow  # hundreds of deliveries, each drained: the full suite only
def test_all_24_orders_fold_to_the_same_payment(adyen_app: Flask) -> None:
    states = set()
    for n, order in enumerate(itertools.permutations(range(4))):
        prefix = f"O{n:02}"
        items = notifications(prefix)
        for i in order:
            assert post(adyen_app, "/webhooks/adyen", adyen_body(adyen_item(**items[i])), {}) == 200
            drain(adyen_app)
        stored = payment(adyen_app, f"{prefix}PAY")
        assert stored["version"] == 4
        states.add(json.dumps(stored["state"], sort_keys=True).replace(prefix, "P"))
    (state,) = states  # one state for every order
    folded = json.loads(state)
    assert {
        k: folded[k]
        for k in (
            "status",
            "authorised",
            "captured",
            "refunded",
            "chargedBack",
            "currency",
            "merchantReference",
            "eventCode",
            "gap",
        )
    } == {
        "status": "refunded",
        "authorised": 1130,
        "captured": 1130,
        "refunded": 1130,
        "chargedBack": 0,
        "currency": "EUR",
        "merchantReference": "TestPayment-1407325143704",
        "eventCode": "REFUND",
        "gap": False,
    }
    assert folded["applied"] == sorted(
        ["PPAY:AUTHORISATION:true", "PCAP:CAPTURE:true", "PREF1:REFUND:true", "PREF2:REFUND:true"]
    )


def test_partial_refund_shows_totals_not_the_refund_amount(adyen_app: Flask) -> None:
    items = notifications("X")
    for item in items[:3]:
        assert post(adyen_app, "/webhooks/adyen", adyen_body(adyen_item(**item)), {}) == 200
    drain(adyen_app)
    state = payment(adyen_app, "XPAY")["state"]
    assert (state["status"], state["authorised"], state["captured"], state["refunded"]) == (
        "partially_refunded",
        1130,
        1130,
        300,
    )


def test_payments_with_gaps_are_listed_until_their_authorisation_arrives(adyen_app: Flask) -> None:
    items = notifications("G")
    assert post(adyen_app, "/webhooks/adyen", adyen_body(adyen_item(**items[1]), adyen_item(**items[2])), {}) == 200
    drain(adyen_app)
    listed = adyen_app.test_client().get("/admin/api/gaps", headers=admin_headers()).get_json()
    assert [(g["object_id"], g["applied"]) for g in listed["gaps"]] == [
        ("GPAY", ["GCAP:CAPTURE:true", "GREF1:REFUND:true"])
    ]
    assert [(g["provider"], g["endpoint"]) for g in listed["gaps"]] == [("adyen", "adyen")]
    page = adyen_app.test_client().get("/admin/gaps", headers=admin_headers())
    assert page.status_code == 200 and b"GPAY" in page.data and b"<td>adyen</td>" in page.data
    assert post(adyen_app, "/webhooks/adyen", adyen_body(adyen_item(**items[0])), {}) == 200
    drain(adyen_app)
    assert adyen_app.test_client().get("/admin/api/gaps", headers=admin_headers()).get_json()["gaps"] == []
    assert b"GPAY" not in adyen_app.test_client().get("/admin/gaps", headers=admin_headers()).data


# -- PayPal: act only on PayPal's copy ------------------------------------------------------------

PAYPAL_EVENTS: dict[str, Any] = {}
PAYPAL_SEEN: list[tuple[str, str, str | None]] = []


def fake_paypal(method: str, path: str, query: Any, headers: Any, body: bytes) -> tuple[int, Any]:
    PAYPAL_SEEN.append((method, path, headers.get("Authorization")))
    if path == "/v1/oauth2/token":
        import base64

        if headers.get("Authorization") != "Basic " + base64.b64encode(b"client-1:secret-1").decode():
            return 401, {"error": "invalid_client"}
        assert body == b"grant_type=client_credentials"
        return 200, {"access_token": "A21-token", "token_type": "Bearer", "expires_in": 32400}
    if headers.get("Authorization") != "Bearer A21-token":
        return 401, {"error": "invalid_token"}
    event_id = path.rpartition("/")[2]
    if path.startswith("/v1/notifications/webhooks-events/") and event_id in PAYPAL_EVENTS:
        return 200, PAYPAL_EVENTS[event_id]
    return 404, {"name": "INVALID_RESOURCE_ID"}


@pytest.fixture(params=["sqlite", "postgres"])
def paypal_app(request: pytest.FixtureRequest) -> Iterator[Flask]:
    PAYPAL_EVENTS.clear()
    PAYPAL_SEEN.clear()
    with serve(fake_paypal) as base:
        config = backend_config(request)
        config["ENDPOINTS"]["paypal"] = dict(
            endpoints()["paypal"], provider="paypal", client_id="client-1", client_secret="secret-1", api_base=base
        )
        yield make_app(config)


def genuine_paypal(app: Flask) -> tuple[bytes, dict[str, str]]:
    from tests.conftest import PAYLOADS
    from tests.support.catalogue import SENT

    endpoint = app.extensions["webhooks"].settings.endpoints["paypal"]
    raw = (PAYLOADS / SENT["paypal"]).read_bytes()
    PAYPAL_EVENTS[json.loads(raw)["id"]] = json.loads(raw)  # PayPal's own copy
    return providers.get("paypal").sign(endpoint, raw, now=time.time())


def test_a_genuine_paypal_event_is_acted_on_as_paypal_has_it(paypal_app: Flask) -> None:
    body, headers = genuine_paypal(paypal_app)
    assert post(paypal_app, "/webhooks/paypal", body, headers) == 200
    drain(paypal_app)
    event = json.loads(body)
    assert [c["event_id"] for c in state_handlers.CALLS] == [event["id"]]
    assert state_handlers.CALLS[0]["data"] == PAYPAL_EVENTS[event["id"]]
    assert ("GET", f"/v1/notifications/webhooks-events/{event['id']}", "Bearer A21-token") in PAYPAL_SEEN


def test_a_forged_body_with_a_genuine_signature_is_stored_but_never_acted_on(paypal_app: Flask) -> None:
    body, headers = genuine_paypal(paypal_app)
    event = json.loads(body)
    event["resource"]["amount"] = {"currency_code": "USD", "value": "999999.00"}  # same id, more money
    event["pad"] = PAD.decode()
    forged = crc_twin(json.dumps(event).encode(), zlib.crc32(body))
    assert zlib.crc32(forged) == zlib.crc32(body)  # the signature covers it: the attack is real
    assert post(paypal_app, "/webhooks/paypal", forged, headers) == 200  # the forgery arrives first
    drain(paypal_app)
    ((status, error, payload),) = rows(paypal_app, "SELECT status, last_error, payload FROM events")
    assert bytes(payload) == forged and status == "failed"
    assert "differs from the delivered body in resource" in error
    assert state_handlers.CALLS == []
    assert rows(paypal_app, "SELECT count(*) FROM objects") == [(0,)]


def test_an_event_paypal_does_not_know_is_never_acted_on(paypal_app: Flask) -> None:
    body, headers = genuine_paypal(paypal_app)
    PAYPAL_EVENTS.clear()
    assert post(paypal_app, "/webhooks/paypal", body, headers) == 200
    drain(paypal_app)
    ((status, error),) = rows(paypal_app, "SELECT status, last_error FROM events")
    assert status == "failed" and "PayPal has no event" in error and state_handlers.CALLS == []
