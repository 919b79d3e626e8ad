"""GoCardless: gocardless-pro-python's own webhook vector, its ``webhooks.parse`` oracle both ways
over randomized batches, payload files, one test per failure rule (answered 498), rotation, and
through the app: a batch stored once under concurrent duplicates, refusals store nothing, an
unsigned header changed is no second event."""

from __future__ import annotations

import hashlib
import hmac
import json
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from gocardless_pro import webhooks
from gocardless_pro.errors import InvalidSignatureError

from tests.conftest import base_config, make_app, rows
from webhooks.errors import ConfigError, VerificationError
from webhooks.providers.base import Endpoint, Request, encode_item
from webhooks.providers.gocardless import GoCardless

PAYLOADS = Path(__file__).parents[1] / "payloads" / "gocardless"
PROVIDER = GoCardless()
SECRET = "ED7D658C-D8EB-4941-948B-3973214F2D49"  # gocardless-pro-python tests/webhooks_test.py
NOW = 1_700_000_000
ORACLE_EVENTS = 250


def endpoint(*secrets: str) -> Endpoint:
    return Endpoint("gocardless", "gocardless", secrets or (SECRET,))


def signed(body: bytes, *, secret: str = SECRET, **extra: str) -> Request:
    """The one correct signing helper every negative case starts from."""
    _, headers = PROVIDER.sign(endpoint(secret), body, now=NOW)
    return Request({k.lower(): v for k, v in {**headers, **extra}.items() if v}, body)


def outcome(request: Request, ep: Endpoint) -> tuple[str, int]:
    try:
        PROVIDER.verify(request, ep, now=NOW)
    except VerificationError as exc:
        return str(exc.reason), exc.status
    return "ok", 200


# -- gocardless-pro-python's own vector (tests/webhooks_test.py, tests/fixtures/webhook_body.json) --

SDK_BODY = (PAYLOADS / "subscriptions_mandates__sdk_vector.json").read_bytes()  # the fixture, stripped as the test does
SDK_SIGNATURE = "2693754819d3e32d7e8fcb13c729631f316c6de8dc1cf634d6527f1c07276e7e"


def test_sdk_vector_parses_the_body() -> None:
    """test_it_parses_the_body: two events, the first ``EV00BD05S5VM2T``."""
    sdk = webhooks.parse(SDK_BODY.decode(), SECRET, SDK_SIGNATURE)
    result = PROVIDER.verify(Request({"webhook-signature": SDK_SIGNATURE}, SDK_BODY), endpoint(), now=NOW)
    assert [e.event_id for e in result.events] == [e.id for e in sdk] == ["EV00BD05S5VM2T", "EV00BD05TB8K63"]
    assert [e.event_type for e in result.events] == ["subscriptions.created", "mandates.created"]
    assert [(e.index, e.object_id) for e in result.events] == [(0, "SB0003JJQ2MR06"), (1, "MD000AMA19XGEC")]
    assert signed(SDK_BODY).header("Webhook-Signature") == SDK_SIGNATURE


def test_sdk_vector_wrong_key_is_refused_by_both() -> None:
    """test_it_raises_with_invalid_signature: ``anotherkey``."""
    with pytest.raises(InvalidSignatureError):
        webhooks.parse(SDK_BODY.decode(), "anotherkey", SDK_SIGNATURE)
    request = Request({"webhook-signature": SDK_SIGNATURE}, SDK_BODY)
    assert outcome(request, endpoint("anotherkey")) == ("signature_mismatch", 498)


# -- the SDK as oracle, both ways, over randomized batches -------------------------------------------

RESOURCES = ["payments", "mandates", "subscriptions", "payouts", "refunds", "instalment_schedules", "creditors"]


def random_batch(rng: random.Random, size: int) -> bytes:
    events = []
    for _ in range(size):
        resource = rng.choice(RESOURCES)
        events.append(
            {
                "id": f"EV{rng.getrandbits(56):014X}"[:14],
                "created_at": f"20{rng.randrange(15, 30)}-0{rng.randrange(1, 10)}-1{rng.randrange(10)}T0{rng.randrange(10)}"
                f":{rng.randrange(10, 60)}:{rng.randrange(10, 60)}.{rng.randrange(1000):03d}Z",
                "resource_type": resource,
                "action": rng.choice(["created", "submitted", "confirmed", "failed", "paid_out", "cancelled"]),
                "links": {resource.removesuffix("s"): f"{resource[:2].upper()}{rng.getrandbits(48):012X}"},
                "details": {
                    "origin": rng.choice(["api", "gocardless", "bank"]),
                    "description": "".join(rng.choices('abc é€😀"\\/\n\t ', k=rng.randrange(0, 30))),
                },
                "metadata": {},
            }
        )
    data: dict[str, Any] = {"events": events, "meta": {"webhook_id": f"WB{rng.getrandbits(48):012X}"}}
    return json.dumps(data, ensure_ascii=rng.random() < 0.5, separators=rng.choice([(",", ":"), (", ", ": ")])).encode()


def test_sdk_oracle_both_ways_over_randomized_batches() -> None:
    """Ours signs → ``webhooks.parse`` accepts and yields our event ids; a signature made
    independently (the SDK has no signer) or mangled → the SDK and we agree on every one."""
    rng = random.Random(20261204)
    disagreements, events = [], 0
    for n in range(ORACLE_EVENTS):
        body = random_batch(rng, rng.randrange(1, 4))
        secret = "".join(rng.choices("ABCDEF0123456789-abcxyz_", k=rng.randrange(1, 48)))
        _, headers = PROVIDER.sign(endpoint(secret), body, now=NOW)
        ours = PROVIDER.verify(
            Request({"webhook-signature": headers["Webhook-Signature"]}, body), endpoint(secret), now=NOW
        )
        sdk = webhooks.parse(body.decode(), secret, headers["Webhook-Signature"])
        assert [e.event_id for e in ours.events] == [e.id for e in sdk]
        events += len(sdk)
        mac = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        case = rng.choice(["genuine", "body", "secret", "signature"])
        sent_body = body.replace(b"events", b"eventS", 1) if case == "body" else body
        sent_sig = mac[:-1] + ("0" if mac[-1] != "0" else "1") if case == "signature" else mac
        key = secret + "x" if case == "secret" else secret
        try:
            webhooks.parse(sent_body.decode(), key, sent_sig)
            sdk_ok = True
        except InvalidSignatureError:
            sdk_ok = False
        verdict, _ = outcome(Request({"webhook-signature": sent_sig}, sent_body), endpoint(key))
        if sdk_ok != (verdict not in ("signature_mismatch", "malformed_signature", "missing_signature")):
            disagreements.append((n, case, verdict))
    assert disagreements == [] and events >= ORACLE_EVENTS


# -- payload files, batches, objects, rotation --------------------------------------------------------


def test_a_batch_is_one_event_per_element_each_with_its_object() -> None:
    body = (PAYLOADS / "payments__batch.json").read_bytes()
    result = PROVIDER.verify(signed(body), endpoint(), now=NOW)
    assert [(e.event_id, e.event_type, e.index) for e in result.events] == [
        ("EV0000ED6V59V1", "payments.submitted", 0),
        ("EV0000ED6W8X2T", "payments.confirmed", 1),
        ("EV0000ED6Y0Q3K", "payouts.paid", 2),
    ]
    assert result.replay_key is None  # every id is signed
    data = json.loads(body)
    refs = []
    for event in result.events:
        item = PROVIDER.event_data(body, event.index)
        assert item == data["events"][event.index] == PROVIDER.event_data(encode_item(item), None)
        ref = PROVIDER.extract(event.event_type, item)
        assert ref is not None
        refs.append((ref.type, ref.id))
    assert refs == [("payment", "PM0006ZQ8W4RDE"), ("payment", "PM0006ZQ8W4RDE"), ("payout", "PO0000F4YBZWQ2")]
    first = PROVIDER.extract("payments.submitted", data["events"][0])
    second = PROVIDER.extract("payments.confirmed", data["events"][1])
    assert first is not None and second is not None and first.version < second.version  # created_at orders them
    assert PROVIDER.describe_version(second.version) == "event created 2024-05-17 09:12:44.918 UTC"


def test_the_single_event_payload() -> None:
    body = (PAYLOADS / "mandates.active__single.json").read_bytes()
    (event,) = PROVIDER.verify(signed(body), endpoint(), now=NOW).events
    assert (event.event_id, event.event_type, event.object_id) == (
        "EV01J7QRF0KJWR",
        "mandates.active",
        "MD000ZQT5CPCVV",
    )


def test_rotation_records_the_matching_secret() -> None:
    for index, secret in enumerate(("old", "new")):
        assert (
            PROVIDER.verify(signed(SDK_BODY, secret=secret), endpoint("old", "new"), now=NOW).events[0].secret_index
            == index
        )


def test_a_secret_is_required_at_start_up() -> None:
    for secrets in ((), ("",), (SECRET, "")):
        with pytest.raises(ConfigError, match="'gocardless'"):
            PROVIDER.validate(Endpoint("gocardless", "gocardless", secrets))
    PROVIDER.validate(endpoint())


BODY = (PAYLOADS / "payments__batch.json").read_bytes()


@pytest.mark.parametrize(
    ("req", "expected"),
    [
        (signed(BODY, **{"Webhook-Signature": ""}), ("missing_signature", 498)),
        (signed(BODY, **{"Webhook-Signature": "sha256=abc"}), ("malformed_signature", 498)),
        (signed(BODY, **{"Webhook-Signature": "00" * 32}), ("signature_mismatch", 498)),
        (
            Request(signed(BODY).headers, BODY.replace(b"EV0000ED6W8X2T", b"EV0000ED6W8X2U")),
            ("signature_mismatch", 498),
        ),
        (signed(BODY, secret="wrong"), ("signature_mismatch", 498)),
        (signed(b"{not json"), ("malformed_payload", 400)),
        (signed(b'{"events": []}'), ("malformed_payload", 400)),
        (signed(b'{"events": [{"id": "EV1", "resource_type": "payments"}]}'), ("malformed_payload", 400)),
        (signed(b'{"events": ["EV1"]}'), ("malformed_payload", 400)),
    ],
    ids=[
        "no-signature",
        "not-hex",
        "zeros",
        "event-id-changed",
        "wrong-secret",
        "bad-json",
        "empty",
        "no-action",
        "not-objects",
    ],
)
def test_failures(req: Request, expected: tuple[str, int]) -> None:
    assert outcome(req, endpoint()) == expected


# -- through the app: a batch stored once, refusals store nothing, unsigned parts no second event ----


@pytest.fixture
def gc_app(sqlite_url: str) -> Flask:
    return make_app(base_config(sqlite_url, ENDPOINTS={"gocardless": {"provider": "gocardless", "secrets": [SECRET]}}))


def post(app: Flask, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    response = app.test_client().post("/webhooks/gocardless", data=body, headers=headers)
    return response.status_code, response.get_json()


def stored(app: Flask) -> list[str]:
    return sorted(r[0] for r in rows(app, "SELECT event_id FROM events WHERE endpoint = 'gocardless'"))


BATCH_IDS = sorted(e["id"] for e in json.loads(BODY)["events"])


def test_ten_concurrent_duplicates_are_stored_once(gc_app: Flask) -> None:
    _, headers = PROVIDER.sign(endpoint(), BODY, now=NOW)
    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda _: post(gc_app, BODY, headers)[0], range(10)))
    assert answers == [200] * 10
    assert stored(gc_app) == BATCH_IDS


def test_refusals_are_498_store_nothing_and_name_their_reason(gc_app: Flask) -> None:
    _, headers = PROVIDER.sign(endpoint(), BODY, now=NOW)
    _, foreign = PROVIDER.sign(endpoint("not-our-secret"), BODY, now=NOW)
    assert post(gc_app, BODY.replace(b"submitted", b"cancelled", 1), headers) == (498, {"error": "signature_mismatch"})
    assert post(gc_app, BODY, foreign) == (498, {"error": "signature_mismatch"})
    assert post(gc_app, BODY, {"Origin": "https://api.gocardless.com"}) == (498, {"error": "missing_signature"})
    assert stored(gc_app) == []


def test_a_redelivery_with_other_unsigned_headers_is_a_duplicate(gc_app: Flask) -> None:
    _, headers = PROVIDER.sign(endpoint(), BODY, now=NOW)
    assert post(gc_app, BODY, headers)[0] == 200
    for extra in ({"Origin": "https://api-sandbox.gocardless.com"}, {"User-Agent": "x"}, {"X-Request-Id": "r2"}):
        assert post(gc_app, BODY, headers | extra)[0] == 200
    assert stored(gc_app) == BATCH_IDS
