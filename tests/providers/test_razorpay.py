"""Razorpay: razorpay-python's own webhook vector, its ``Utility`` oracle both ways over randomized
events, payload files, one test per failure rule, rotation, the replay key, and through the app:
stored once under concurrent duplicates, refusals store nothing, a re-labelled id is no new event."""

from __future__ import annotations

import hashlib
import hmac
import json
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import razorpay
from flask import Flask
from razorpay.errors import SignatureVerificationError

from tests.conftest import base_config, make_app, rows
from webhooks.errors import ConfigError, VerificationError
from webhooks.providers.base import Endpoint, Request
from webhooks.providers.razorpay import Razorpay

PAYLOADS = Path(__file__).parents[1] / "payloads" / "razorpay"
PROVIDER = Razorpay()
SECRET = "rzp-webhook-secret"
NOW = 1_700_000_000
UTILITY = razorpay.Client(auth=("key_id", "key_secret")).utility
ORACLE_EVENTS = 250


def endpoint(*secrets: str) -> Endpoint:
    return Endpoint("razorpay", "razorpay", secrets or (SECRET,))


def signed(body: bytes, *, secret: str = SECRET, **extra: str) -> Request:
    """The one correct signing helper every negative case starts from."""
    _, headers = PROVIDER.sign(endpoint(secret), body, now=NOW)
    return Request({k.lower(): v for k, v in {**headers, **extra}.items() if v}, body)


def outcome(request: Request, ep: Endpoint) -> str:
    try:
        PROVIDER.verify(request, ep, now=NOW)
    except VerificationError as exc:
        return str(exc.reason)
    return "ok"


# -- razorpay-python's own test vector (tests/test_client_utility.py, tests/mocks/fake_payment_authorized_webhook.json)


def test_sdk_vector_verify_webhook_signature() -> None:
    """razorpay/razorpay-python tests/test_client_utility.py::test_verify_webhook_signature: the
    secret is the client's ``key_secret``, the body the mock file byte for byte."""
    body = (PAYLOADS / "payment.authorized__sdk_vector.json").read_bytes()
    sig = "d60e67fd884556c045e9be7dad57903e33efc7172c17c6e3ef77db42d2b366e9"
    assert UTILITY.verify_webhook_signature(body.decode(), sig, "key_secret")
    request = Request({"x-razorpay-signature": sig, "x-razorpay-event-id": "EvSdkVector001"}, body)
    event = PROVIDER.verify(request, endpoint("key_secret"), now=NOW).events[0]
    assert (event.event_id, event.event_type, event.object_id) == (
        "EvSdkVector001",
        "payment.authorized",
        "pay_6koWN7bvxujzxM",
    )
    assert signed(body, secret="key_secret").header("X-Razorpay-Signature") == sig


def test_sdk_vector_wrong_signature_is_refused_by_both() -> None:
    """test_verify_webhook_signature_with_exception: ``test_signature`` over an empty body."""
    with pytest.raises(SignatureVerificationError):
        UTILITY.verify_webhook_signature("", "test_signature", "key_secret")
    request = Request({"x-razorpay-signature": "test_signature", "x-razorpay-event-id": "e"}, b"")
    assert outcome(request, endpoint("key_secret")) == "malformed_signature"


# -- the SDK as oracle, both ways, over randomized events -------------------------------------------


def random_event(rng: random.Random) -> bytes:
    entity = rng.choice(["payment", "order", "refund", "invoice", "subscription", "payment_link"])
    action = rng.choice(["created", "authorized", "captured", "failed", "paid", "processed", "activated"])
    obj: dict[str, Any] = {
        "id": f"{entity[:4]}_{''.join(rng.choices('ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789', k=14))}",
        "entity": entity,
        "amount": rng.randrange(1, 10**9),
        "currency": rng.choice(["INR", "USD", "EUR", "SGD"]),
        "notes": {"note": "".join(rng.choices('abc é€😀"\\/\n\t ', k=rng.randrange(0, 20)))},
        "created_at": rng.randrange(1_500_000_000, 1_800_000_000),
    }
    event = {
        "entity": "event",
        "account_id": f"acc_{rng.getrandbits(48):012x}",
        "event": f"{entity}.{action}",
        "contains": [entity],
        "payload": {entity: {"entity": obj}},
        "created_at": rng.randrange(1_500_000_000, 1_800_000_000),
    }
    text = json.dumps(event, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 2]))
    return text.encode()


def test_sdk_oracle_both_ways_over_randomized_events() -> None:
    """Ours signs → the SDK accepts; a signature made independently (the SDK has no signer) or
    mangled → the SDK and we agree, accept or refuse, on every one: 0 disagreements."""
    rng = random.Random(20261202)
    disagreements = []
    for n in range(ORACLE_EVENTS):
        body = random_event(rng)
        secret = "".join(rng.choices("abcdefghijklmnopqrstuvwxyz0123456789_-!@# ", k=rng.randrange(1, 40)))
        _, headers = PROVIDER.sign(endpoint(secret), body, now=NOW)
        assert UTILITY.verify_webhook_signature(body.decode(), headers["X-Razorpay-Signature"], secret)
        mac = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        case = rng.choice(["genuine", "body", "secret", "signature"])
        sent_body = body.replace(b"event", b"evenT", 1) if case == "body" else body
        sent_sig = mac[:-1] + ("0" if mac[-1] != "0" else "1") if case == "signature" else mac
        key = secret + "x" if case == "secret" else secret
        try:
            sdk = bool(UTILITY.verify_webhook_signature(sent_body.decode(), sent_sig, key))
        except SignatureVerificationError:
            sdk = False
        request = Request({"x-razorpay-signature": sent_sig, "x-razorpay-event-id": f"Ev{n}"}, sent_body)
        ours = outcome(request, endpoint(key))
        if sdk != (ours == "ok"):
            disagreements.append((n, case, ours))
    assert disagreements == []


# -- payload files, rotation, the replay key -------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "event_type", "object_type", "object_id", "amount"),
    [
        ("payment.captured__card.json", "payment.captured", "payment", "pay_DESlfW9H8K9uqM", (100, "INR")),
        ("order.paid__netbanking.json", "order.paid", "payment", "pay_DESlfW9H8K9uqM", (100, "INR")),
        ("refund.processed__partial.json", "refund.processed", "refund", "rfnd_FP8DDKxqJif6ca", (50, "INR")),
        (
            "payment.authorized__sdk_vector.json",
            "payment.authorized",
            "payment",
            "pay_6koWN7bvxujzxM",
            (1000000, "INR"),
        ),
    ],
)
def test_payload_files(name: str, event_type: str, object_type: str, object_id: str, amount: tuple[int, str]) -> None:
    body = (PAYLOADS / name).read_bytes()
    request = signed(body)
    result = PROVIDER.verify(request, endpoint(), now=NOW)
    (event,) = result.events
    assert (event.event_id, event.event_type) == (request.header("X-Razorpay-Event-Id"), event_type)
    data = PROVIDER.event_data(body, None)
    ref = PROVIDER.extract(event.event_type, data)
    assert ref is not None and (ref.type, ref.id) == (object_type, object_id)
    assert ref.version == data["created_at"] * 1000
    assert PROVIDER.describe_version(ref.version) is not None
    assert PROVIDER.amount(body, None) == amount


def test_rotation_records_the_matching_secret() -> None:
    body = (PAYLOADS / "payment.captured__card.json").read_bytes()
    for index, secret in enumerate(("old", "new")):
        assert (
            PROVIDER.verify(signed(body, secret=secret), endpoint("old", "new"), now=NOW).events[0].secret_index
            == index
        )


def test_the_event_id_is_not_signed_so_the_signature_is_the_replay_key() -> None:
    body = (PAYLOADS / "payment.captured__card.json").read_bytes()
    first = PROVIDER.verify(signed(body), endpoint(), now=NOW)
    other = PROVIDER.verify(signed(body, **{"X-Razorpay-Event-Id": "AttackerChosen1"}), endpoint(), now=NOW)
    assert other.events[0].event_id == "AttackerChosen1"  # the id is whatever the header says...
    assert first.replay_key is not None and other.replay_key == first.replay_key  # ...the signature is one


def test_a_secret_is_required_at_start_up() -> None:
    for secrets in ((), ("",), ("ok", "")):
        with pytest.raises(ConfigError, match="'razorpay'"):
            PROVIDER.validate(Endpoint("razorpay", "razorpay", secrets))
    PROVIDER.validate(endpoint())


BODY = (PAYLOADS / "payment.captured__card.json").read_bytes()


@pytest.mark.parametrize(
    ("req", "reason"),
    [
        (signed(BODY, **{"X-Razorpay-Signature": ""}), "missing_signature"),
        (signed(BODY, **{"X-Razorpay-Signature": "sha256=abc"}), "malformed_signature"),
        (signed(BODY, **{"X-Razorpay-Signature": "00" * 32}), "signature_mismatch"),
        (Request(signed(BODY).headers, BODY.replace(b"pay_DESl", b"pay_XXXX")), "signature_mismatch"),
        (signed(BODY, secret="wrong"), "signature_mismatch"),
        (signed(BODY, **{"X-Razorpay-Event-Id": ""}), "malformed_payload"),
        (signed(b"{not json"), "malformed_payload"),
        (signed(b'{"entity": "event", "contains": []}'), "malformed_payload"),
    ],
    ids=["no-signature", "not-hex", "zeros", "body-changed", "wrong-secret", "no-event-id", "bad-json", "no-type"],
)
def test_failures(req: Request, reason: str) -> None:
    assert outcome(req, endpoint()) == reason


# -- through the app: stored once, refusals store nothing, re-labelled never a second event --------


@pytest.fixture
def rzp_app(sqlite_url: str) -> Flask:
    return make_app(base_config(sqlite_url, ENDPOINTS={"razorpay": {"provider": "razorpay", "secrets": [SECRET]}}))


def post(app: Flask, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    response = app.test_client().post("/webhooks/razorpay", data=body, headers=headers)
    return response.status_code, response.get_json()


def stored(app: Flask) -> list[tuple[str, str]]:
    return [tuple(r) for r in rows(app, "SELECT event_id, event_type FROM events WHERE endpoint = 'razorpay'")]


def test_ten_concurrent_duplicates_are_stored_once(rzp_app: Flask) -> None:
    _, headers = PROVIDER.sign(endpoint(), BODY, now=NOW)
    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda _: post(rzp_app, BODY, headers)[0], range(10)))
    assert answers == [200] * 10
    assert stored(rzp_app) == [(headers["X-Razorpay-Event-Id"], "payment.captured")]


def test_refusals_store_nothing_and_name_their_reason(rzp_app: Flask) -> None:
    _, headers = PROVIDER.sign(endpoint(), BODY, now=NOW)
    _, foreign = PROVIDER.sign(endpoint("not-our-secret"), BODY, now=NOW)
    assert post(rzp_app, BODY.replace(b"100", b"999", 1), headers) == (400, {"error": "signature_mismatch"})
    assert post(rzp_app, BODY, foreign) == (400, {"error": "signature_mismatch"})
    assert post(rzp_app, BODY, {"X-Razorpay-Event-Id": "E1"}) == (400, {"error": "missing_signature"})
    assert stored(rzp_app) == []


def test_a_relabelled_capture_is_no_second_event(rzp_app: Flask) -> None:
    _, headers = PROVIDER.sign(endpoint(), BODY, now=NOW)
    assert post(rzp_app, BODY, headers)[0] == 200
    for n in range(3):
        assert post(rzp_app, BODY, headers | {"X-Razorpay-Event-Id": f"Relabelled{n}"})[0] == 200
    assert stored(rzp_app) == [(headers["X-Razorpay-Event-Id"], "payment.captured")]
    counted = rows(rzp_app, "SELECT count FROM rejection_counts WHERE reason = 'replayed_signature'")
    assert counted == [(3,)]
