"""One captured delivery never mints a second event.

Several schemes sign neither the event id nor a timestamp (GitHub, Shopify, Twilio, PayPal's
CRC-32, the generic ``hmac`` with ``id_header``): whoever holds one genuine delivery could re-send it
with a new id, topic or parameter layout. For every kind, a genuine delivery is replayed with each
unsigned part varied (ids, topics, unsigned headers, ``Host``, parameter boundaries, a CRC-32
collision): at most one event ever exists, and a re-labelled replay is answered like a duplicate and
counted as ``replayed_signature``.
"""

from __future__ import annotations

import json
import time
import zlib
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest
from flask import Flask
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import PAYLOADS, admin_headers, base_config, make_app, rows
from tests.support.catalogue import HOST, PUBLIC_TWILIO, SENT, all_endpoints, genuine
from tests.support.crc32 import PAD, crc_twin
from webhooks import providers

PROPERTY = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
ID_HEADERS = [
    "X-GitHub-Delivery",
    "X-GitHub-Event",
    "X-Shopify-Topic",
    "X-Shopify-Webhook-Id",
    "Shopify-Webhook-Id",
    "Shopify-Topic",
    "X-Shopify-Event-Id",
    "I-Twilio-Idempotency-Token",
    "webhook-id",
    "svix-id",
    "X-Event-Id",
    "X-Event-Type",
    "PAYPAL-TRANSMISSION-ID",
    "X-Request-Id",
    "X-Event-Name",
    "Authorization",
    "X-Razorpay-Event-Id",
    "Origin",
    "x-amz-sns-message-id",
]


def make(url: str, **extra: Any) -> Flask:
    return make_app(base_config(url, ENDPOINTS=all_endpoints(), **extra))


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Flask:
    return make(f"sqlite:///{tmp_path_factory.mktemp('replay') / 'webhooks.db'}")


@pytest.fixture(params=["sqlite", "postgres"])
def both(request: pytest.FixtureRequest) -> Flask:
    if request.param == "sqlite":
        return make(request.getfixturevalue("sqlite_url"))
    return make(request.getfixturevalue("pg_url"), REDIS_URL=request.getfixturevalue("redis_url"))


def post(app: Flask, path: str, body: bytes, headers: dict[str, str], host: str = HOST) -> int:
    response = app.test_client().post(path, data=body, headers=headers, base_url=f"https://{host}")
    assert response.status_code < 500, response.get_data()
    return response.status_code


def count(app: Flask, name: str) -> int:
    return int(rows(app, "SELECT count(*) FROM events WHERE endpoint = :p", p=name)[0][0])


def replays_counted(app: Flask, name: str) -> int:
    found = rows(
        app, "SELECT count FROM rejection_counts WHERE endpoint = :e AND reason = 'replayed_signature'", e=name
    )
    return int(found[0][0]) if found else 0


# -- the attacks of the review, each on both databases ------------------------------------------


@pytest.mark.parametrize(
    ("name", "relabel"),
    [
        ("github", {"X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958"}),
        ("github", {"X-GitHub-Delivery": "another", "X-GitHub-Event": "pull_request"}),
        ("shopify", {"X-Shopify-Topic": "refunds/create"}),
        (
            "shopify",
            {"X-Shopify-Webhook-Id": "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043", "X-Shopify-Topic": "orders/cancelled"},
        ),
        ("twilio", {"I-Twilio-Idempotency-Token": "attacker-chosen"}),
        ("hmac_by_header", {"X-Event-Id": "evt-minted", "X-Event-Type": "invoice.refunded"}),
        ("checkout", {"Authorization": "minted", "X-Request-Id": "evt_minted"}),
        ("paystack", {"X-Request-Id": "minted", "X-Event-Name": "refund.processed"}),
        ("lemonsqueezy", {"X-Event-Name": "order_refunded"}),
        ("razorpay", {"X-Razorpay-Event-Id": "KyQ7hiqZYeWWVn"}),
        ("paddle", {"X-Request-Id": "relabelled"}),
        ("square", {"Square-Environment": "Sandbox", "X-Square-Signature": "c2hhMQ=="}),
        ("zoom", {"x-zm-trackingid": "attacker-chosen", "Authorization": "verification-token"}),
        ("braintree", {"X-Request-Id": "relabelled", "Origin": "https://evil.example"}),
        ("sns", {"x-amz-sns-message-id": "relabelled", "x-amz-sns-message-type": "UnsubscribeConfirmation"}),
        ("plaid", {"X-Request-Id": "relabelled", "Plaid-Webhook-Type": "TRANSFER"}),
        ("mollie", {"X-Request-Id": "relabelled", "User-Agent": "Mollie.nl HTTP client/2.0"}),
        ("mercadopago", {"User-Agent": "MercadoPago WebHook v1.0 payment"}),
    ],
)
def test_a_relabelled_replay_is_a_duplicate_not_an_event(both: Flask, name: str, relabel: dict[str, str]) -> None:
    body, headers, path = genuine(both, name)
    assert post(both, path, body, headers) == 200
    assert count(both, name) == 1
    assert post(both, path, body, headers | relabel) == 200  # answered like a duplicate
    assert count(both, name) == 1
    stored_type = rows(both, "SELECT event_type FROM events WHERE endpoint = :p", p=name)[0][0]
    assert stored_type not in relabel.values()  # the attacker's topic never became an event type
    new_id = any(
        h in relabel
        for h in (
            "X-GitHub-Delivery",
            "X-Shopify-Webhook-Id",
            "I-Twilio-Idempotency-Token",
            "X-Event-Id",
            "X-Razorpay-Event-Id",
        )
    )
    assert replays_counted(both, name) == (1 if new_id else 0)  # same id, other topic: a plain duplicate
    assert post(both, path, body, headers) == 200  # the genuine retry is a plain duplicate
    assert replays_counted(both, name) == (1 if new_id else 0)


def test_twilio_parameter_boundaries_cannot_move(both: Flask) -> None:
    # Twilio signs name+value concatenated: "MessageSid=SM1&MessageStatus=delivered" and
    # "MessageSid=SM1MessageStatusdelivered" give the same string, so the same signature.
    endpoint = both.extensions["webhooks"].settings.endpoints["twilio"]
    original = b"MessageSid=SM1&MessageStatus=delivered"
    body, headers, path = genuine(both, "twilio", original)
    assert post(both, path, body, headers) == 200
    moved = b"MessageSid=SM1MessageStatusdelivered"
    assert (
        providers.get("twilio")
        .verify(  # the attack is real: the moved body verifies
            providers.base.Request({k.lower(): v for k, v in headers.items()}, moved, PUBLIC_TWILIO),
            endpoint,
            now=time.time(),
        )
        .events
    )
    assert post(both, path, moved, headers | {"I-Twilio-Idempotency-Token": "fresh"}) == 200
    assert count(both, "twilio") == 1
    assert replays_counted(both, "twilio") == 1


def test_paypal_crc32_forgery_with_genuine_headers_is_no_new_event(both: Flask) -> None:
    body, headers, path = genuine(both, "paypal")
    assert post(both, path, body, headers) == 200
    event = json.loads(body)
    event.update(id="WH-FORGED-1", event_type="PAYMENT.CAPTURE.REFUNDED")
    event["resource"]["amount"] = {"currency_code": "USD", "value": "999999.00"}
    event["pad"] = PAD.decode()
    forged = crc_twin(json.dumps(event).encode(), zlib.crc32(body))
    assert zlib.crc32(forged) == zlib.crc32(body) and json.loads(forged)["id"] == "WH-FORGED-1"
    assert post(both, path, forged, headers) == 200  # verifies (CRC-32), but its signature is spent
    assert count(both, "paypal") == 1
    assert replays_counted(both, "paypal") == 1


def test_paypal_transmission_outside_the_window_is_refused(app: Flask) -> None:
    endpoint = app.extensions["webhooks"].settings.endpoints["paypal"]
    raw = (PAYLOADS / SENT["paypal"]).read_bytes()
    body, headers = providers.get("paypal").sign(endpoint, raw, now=time.time() - 3600)
    response = app.test_client().post("/webhooks/paypal", data=body, headers=headers)
    assert response.status_code == 400
    assert response.get_json() == {"error": "timestamp_out_of_tolerance"}


def test_stored_event_keeps_no_replayable_signature(app: Flask) -> None:
    body, headers, path = genuine(app, "github")
    assert post(app, path, body, headers) == 200
    event_id = headers["X-GitHub-Delivery"]
    detail = app.test_client().get(f"/admin/api/events/github/{event_id}", headers=admin_headers()).get_json()
    assert detail["headers"]["X-Hub-Signature-256"] == "[verified signature]"
    assert headers["X-Hub-Signature-256"] not in json.dumps(detail)
    assert detail["secret_index"] == 0


# -- the property: vary every unsigned part, never a second event --------------------------------

mutations = st.fixed_dictionaries(
    {
        "drop": st.sets(st.sampled_from(ID_HEADERS), max_size=3),
        "set": st.dictionaries(
            st.sampled_from(ID_HEADERS),
            st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=40),
            max_size=4,
        ),
        "host": st.sampled_from([HOST, "evil.example", "127.0.0.1:8080", "hooks.example.com:8443"]),
        "query": st.sampled_from(["", "x=1", "bodySHA256=00", "a=%27b%27"]),
    }
)


def form_relayouts(body: bytes) -> list[bytes]:
    """Forms with the same Twilio signed string but other parameter boundaries."""
    pairs = parse_qsl(body.decode(), keep_blank_values=True)
    if len(pairs) < 2:
        return []
    (n1, v1), (n2, v2), *rest = sorted(pairs)
    return [
        urlencode([(n1, v1 + n2 + v2), *rest]).encode(),
        urlencode([(n1 + v1[:1], v1[1:]), (n2, v2), *rest]).encode(),
    ]


@pytest.mark.parametrize("name", [*SENT, "hmac_by_header"])
def test_no_unsigned_part_mints_a_second_event(app: Flask, name: str) -> None:
    body, headers, path = genuine(app, name)
    assert post(app, path, body, headers) == 200
    before = count(app, name)
    kind = all_endpoints()[name]["provider"]
    bodies = [body, *(form_relayouts(body) if kind == "twilio" else [])]

    @PROPERTY
    @given(change=mutations, which=st.sampled_from(bodies))
    def replay(change: dict[str, Any], which: bytes) -> None:
        varied = {k: v for k, v in headers.items() if k not in change["drop"]} | change["set"]
        target = path if not change["query"] else f"{path}{'&' if '?' in path else '?'}{change['query']}"
        post(app, target, which, varied, host=change["host"])
        assert count(app, name) == before

    replay()
