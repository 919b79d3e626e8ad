"""Paddle Billing: paddle-python-sdk's own verifier vector, its ``Verifier``/``PaddleSignature``
oracle both ways over randomized events, payload files, one test per failure rule, rotation with
several ``h1``, and through the app: stored once under concurrent duplicates, refusals (stale
included) store nothing, an unsigned header changed is no second event."""

from __future__ import annotations

import json
import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from paddle_billing.Notifications import PaddleSignature, Secret, Verifier

from tests.conftest import base_config, make_app, rows
from webhooks.errors import ConfigError, VerificationError
from webhooks.providers.base import Endpoint, Request
from webhooks.providers.paddle import Paddle

PAYLOADS = Path(__file__).parents[1] / "payloads" / "paddle"
PROVIDER = Paddle()
SECRET = "pdl_ntfset_01gkpjp8bkh3ajkf6jj1zzss3z_WvRO0eL4Bj9rgYYIBZY6wZhG4EHy9jzh"
NOW = 1_700_000_000
ORACLE_EVENTS = 250


class FakeRequest:
    """What ``Verifier.verify`` reads of a request: ``headers`` and a bytes ``body``."""

    def __init__(self, headers: dict[str, str], body: bytes) -> None:
        self.headers, self.body = headers, body


def endpoint(*secrets: str, tolerance: int = 300) -> Endpoint:
    return Endpoint("paddle", "paddle", secrets or (SECRET,), tolerance_seconds=tolerance)


def signed(body: bytes, *, secret: str = SECRET, now: float = NOW, **extra: str) -> Request:
    """The one correct signing helper every negative case starts from."""
    _, headers = PROVIDER.sign(endpoint(secret), body, now=now)
    return Request({k.lower(): v for k, v in {**headers, **extra}.items() if v}, body)


def outcome(request: Request, ep: Endpoint, now: float = NOW) -> str:
    try:
        PROVIDER.verify(request, ep, now=now)
    except VerificationError as exc:
        return str(exc.reason)
    return "ok"


# -- paddle-python-sdk's own vector (tests/Unit/Notification/test_Verifier.py) --------------------

SDK_HEADER = "ts=1696195954;h1=dummy;h1=d96299976a6eb066f484d7fde011ac56fc32b38fc9940bc419d6e537fdc6ef02"
SDK_SECRETS = (
    "pdl_ntf_01hbpjmytsa32fhr36nqgc3kgb_TjIG2BXbm83HPXqNfziwe506sBEdqL/4",  # should fail
    "pdl_ntf_01hbpjmytsa32fhr36nqgc3kgb_vB/yIOnTOCWIvpBadM5jzBZPHc7OmdSo",  # should fail
    "pdl_ntf_01hbpjmytsa32fhr36nqgc3kgb_WvRO0eL4Bj9rgYYIBZY6wZhG4EHy9jzh",  # should pass
)


def test_sdk_vector_third_secret_matches_next_to_a_dummy_h1() -> None:
    """PaddleHQ/paddle-python-sdk tests/Unit/Notification/test_Verifier.py: ``hello-world`` signed
    at 1696195954, the third of three secrets, a ``h1=dummy`` beside the real one. The body is no
    event, so ours passes the signature and stops at ``malformed_payload``; without the third
    secret it is ``signature_mismatch``."""
    assert Verifier(0).verify(
        FakeRequest({"Paddle-Signature": SDK_HEADER}, b"hello-world"), [Secret(s) for s in SDK_SECRETS]
    )
    request = Request({"paddle-signature": SDK_HEADER}, b"hello-world")
    assert outcome(request, endpoint(*SDK_SECRETS), now=1696195954) == "malformed_payload"
    assert outcome(request, endpoint(*SDK_SECRETS[:2]), now=1696195954) == "signature_mismatch"
    assert outcome(request, endpoint(*SDK_SECRETS), now=1696195954 + 301) == "timestamp_out_of_tolerance"


def test_sdk_vector_signature_is_what_we_sign() -> None:
    _, headers = PROVIDER.sign(endpoint(SDK_SECRETS[2]), b"hello-world", now=1696195954)
    assert headers["Paddle-Signature"] == "ts=1696195954;h1=" + SDK_HEADER.rsplit("h1=", 1)[1]


# -- the SDK as oracle, both ways, over randomized events -------------------------------------------


def random_event(rng: random.Random) -> bytes:
    entity = rng.choice(["transaction", "subscription", "customer", "adjustment", "payout", "price"])
    action = rng.choice(["created", "updated", "completed", "paid", "canceled", "activated", "past_due"])
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(rng.randrange(1_600_000_000, 1_800_000_000)))
    event: dict[str, Any] = {
        "event_id": f"evt_01{rng.getrandbits(100):026x}",
        "event_type": f"{entity}.{action}",
        "occurred_at": f"{stamp}.{rng.randrange(10**6):06d}Z",
        "notification_id": f"ntf_01{rng.getrandbits(100):026x}",
        "data": {
            "id": f"{entity[:3]}_01{rng.getrandbits(100):026x}",
            "status": action,
            "custom_data": {"note": "".join(rng.choices('abc é€😀"\\/\n\t ', k=rng.randrange(0, 20)))},
            "updated_at": f"{stamp}Z",
        },
    }
    return json.dumps(event, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 2])).encode()


def test_sdk_oracle_both_ways_over_randomized_events() -> None:
    """Ours signs → ``Verifier`` accepts (its own clock); the SDK's ``calculate_hmac`` signs → we
    accept; and over mangled requests (body, secret, ts, an extra h1) we agree with the SDK's
    ``PaddleSignature.verify`` on every one: 0 disagreements."""
    rng = random.Random(20261203)
    disagreements = []
    for n in range(ORACLE_EVENTS):
        body = random_event(rng)
        secret = "pdl_ntfset_01" + "".join(
            rng.choices("abcdefghijklmnopqrstuvwxyz0123456789/+_", k=rng.randrange(8, 48))
        )
        now = time.time()
        _, headers = PROVIDER.sign(endpoint(secret), body, now=now)
        assert Verifier().verify(FakeRequest(headers, body), Secret(secret)), n  # the SDK's 5 s drift check included
        ts = rng.randrange(NOW - 100, NOW + 100)
        sdk_mac = PaddleSignature.calculate_hmac(secret, f"{ts}:{body.decode()}".encode()).hexdigest()
        case = rng.choice(["genuine", "body", "secret", "ts", "rotation"])
        header = f"ts={ts};h1={sdk_mac}"
        if case == "ts":
            header = f"ts={ts + 1};h1={sdk_mac}"
        elif case == "rotation":
            header = f"ts={ts};h1={'ab' * 32};h1={sdk_mac}"
        sent_body = body.replace(b"event", b"evenT", 1) if case == "body" else body
        keys = [secret + "x"] if case == "secret" else ["pdl_ntfset_01other", secret]
        try:
            sdk = PaddleSignature().verify(header, sent_body.decode(), [Secret(k) for k in keys])
        except ConnectionRefusedError:
            sdk = False
        ours = outcome(Request({"paddle-signature": header}, sent_body), endpoint(*keys), now=NOW)
        if sdk != (ours == "ok"):
            disagreements.append((n, case, ours))
    assert disagreements == []


# -- payload files, rotation -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "event_type", "object_type", "object_id", "updated"),
    [
        (
            "transaction.completed__card.json",
            "transaction.completed",
            "transaction",
            "txn_01hv8wptq8987qeep44cyrewp9",
            "2024-04-12 10:18:49.738 UTC",
        ),
        (
            "subscription.activated__monthly.json",
            "subscription.activated",
            "subscription",
            "sub_01hv8x29kz0t586xy6zn1a62ny",
            "2024-04-12 10:18:48.831 UTC",
        ),
    ],
)
def test_payload_files(name: str, event_type: str, object_type: str, object_id: str, updated: str) -> None:
    body = (PAYLOADS / name).read_bytes()
    (event,) = PROVIDER.verify(signed(body), endpoint(), now=NOW).events
    data = json.loads(body)
    assert (event.event_id, event.event_type, event.signed_at) == (data["event_id"], event_type, NOW)
    assert (event.object_id, event.reference) == (object_id, data["notification_id"])
    ref = PROVIDER.extract(event.event_type, PROVIDER.event_data(body, None))
    assert ref is not None and (ref.type, ref.id) == (object_type, object_id)
    assert PROVIDER.describe_version(ref.version) == f"updated {updated}"


def test_an_undated_object_has_version_zero() -> None:
    data = {"event_id": "e", "event_type": "customer.updated", "data": {"id": "ctm_1"}}
    ref = PROVIDER.extract("customer.updated", data)
    assert ref is not None and ref.version == 0


def test_rotation_any_h1_of_any_secret() -> None:
    body = (PAYLOADS / "transaction.completed__card.json").read_bytes()
    old = "pdl_ntfset_01old"
    for index, secret in enumerate((old, SECRET)):
        assert (
            PROVIDER.verify(signed(body, secret=secret), endpoint(old, SECRET), now=NOW).events[0].secret_index == index
        )
    old_h1 = signed(body, secret=old).header("Paddle-Signature") or ""
    new_h1 = (signed(body).header("Paddle-Signature") or "").split(";")[1]
    both = Request({"paddle-signature": f"{old_h1};{new_h1}"}, body)
    assert PROVIDER.verify(both, endpoint(SECRET), now=NOW).events[0].secret_index == 0


@pytest.mark.parametrize("secrets", [(), ("",), ("pdl_",), ("ntfset_01gkpjp8bkh3ajkf6jj1zzss3z",), (SECRET, "whsec_x")])
def test_a_malformed_secret_is_refused_at_start_up(secrets: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError, match="'paddle'"):
        PROVIDER.validate(Endpoint("paddle", "paddle", secrets))


BODY = (PAYLOADS / "transaction.completed__card.json").read_bytes()
GOOD = signed(BODY).header("Paddle-Signature") or ""


@pytest.mark.parametrize(
    ("req", "reason"),
    [
        (signed(BODY, **{"Paddle-Signature": ""}), "missing_signature"),
        (signed(BODY, **{"Paddle-Signature": GOOD.split(";")[1]}), "malformed_signature"),
        (signed(BODY, **{"Paddle-Signature": f"ts={NOW}"}), "missing_signature"),
        (signed(BODY, **{"Paddle-Signature": f"ts={NOW};h1=zz"}), "malformed_signature"),
        (signed(BODY, **{"Paddle-Signature": f"ts=soon;{GOOD.split(';')[1]}"}), "malformed_signature"),
        (
            signed(BODY, **{"Paddle-Signature": f"ts={NOW};" + ";".join(["h1=" + "ab" * 32] * 17)}),
            "too_many_signatures",
        ),
        (signed(BODY, **{"Paddle-Signature": GOOD.replace(f"ts={NOW}", f"ts={NOW + 1}")}), "signature_mismatch"),
        (Request(signed(BODY).headers, BODY.replace(b"32400", b"99999", 1)), "signature_mismatch"),
        (signed(BODY, secret="pdl_ntfset_01wrong"), "signature_mismatch"),
        (signed(BODY, now=NOW - 301), "timestamp_out_of_tolerance"),
        (signed(BODY, now=NOW + 301), "timestamp_out_of_tolerance"),
        (signed(b"{not json"), "malformed_payload"),
        (signed(b'{"event_type": "transaction.paid", "data": {}}'), "malformed_payload"),
        (signed(b'{"event_id": "evt_1", "data": {}}'), "malformed_payload"),
    ],
    ids=[
        "no-signature",
        "no-ts",
        "no-h1",
        "h1-not-hex",
        "ts-not-a-number",
        "h1-flood",
        "ts-changed",
        "body-changed",
        "wrong-secret",
        "too-old",
        "too-new",
        "bad-json",
        "no-event-id",
        "no-event-type",
    ],
)
def test_failures(req: Request, reason: str) -> None:
    assert outcome(req, endpoint()) == reason


# -- through the app: stored once, refusals store nothing, unsigned parts never a second event ------


@pytest.fixture
def paddle_app(sqlite_url: str) -> Flask:
    return make_app(base_config(sqlite_url, ENDPOINTS={"paddle": {"provider": "paddle", "secrets": [SECRET]}}))


def post(app: Flask, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    response = app.test_client().post("/webhooks/paddle", data=body, headers=headers)
    return response.status_code, response.get_json()


def stored(app: Flask) -> list[tuple[str, str]]:
    return [tuple(r) for r in rows(app, "SELECT event_id, event_type FROM events WHERE endpoint = 'paddle'")]


def test_ten_concurrent_duplicates_are_stored_once(paddle_app: Flask) -> None:
    _, headers = PROVIDER.sign(endpoint(), BODY, now=time.time())
    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda _: post(paddle_app, BODY, headers)[0], range(10)))
    assert answers == [200] * 10
    assert stored(paddle_app) == [(json.loads(BODY)["event_id"], "transaction.completed")]


def test_refusals_store_nothing_and_name_their_reason(paddle_app: Flask) -> None:
    now = time.time()
    _, headers = PROVIDER.sign(endpoint(), BODY, now=now)
    _, foreign = PROVIDER.sign(endpoint("pdl_ntfset_01notours"), BODY, now=now)
    _, stale = PROVIDER.sign(endpoint(), BODY, now=now - 3600)
    assert post(paddle_app, BODY.replace(b"32400", b"99999", 1), headers) == (400, {"error": "signature_mismatch"})
    assert post(paddle_app, BODY, foreign) == (400, {"error": "signature_mismatch"})
    assert post(paddle_app, BODY, stale) == (400, {"error": "timestamp_out_of_tolerance"})
    assert post(paddle_app, BODY, {"Content-Type": "application/json"}) == (400, {"error": "missing_signature"})
    assert stored(paddle_app) == []


def test_a_redelivery_with_other_unsigned_headers_is_a_duplicate(paddle_app: Flask) -> None:
    _, headers = PROVIDER.sign(endpoint(), BODY, now=time.time())
    assert post(paddle_app, BODY, headers)[0] == 200
    for extra in ({"X-Request-Id": "r2"}, {"Paddle-Version": "1"}, {"X-Forwarded-Host": "evil.example"}):
        assert post(paddle_app, BODY, headers | extra)[0] == 200
    assert stored(paddle_app) == [(json.loads(BODY)["event_id"], "transaction.completed")]
