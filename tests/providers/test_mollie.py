"""Mollie: classic webhooks (a form ``id=tr_…``, signed by nothing) are acted on only through the
payment fetched from Mollie's API (here a fake on 127.0.0.1); signed webhooks (``X-Mollie-Signature``)
are checked against the documented algorithm over randomized events both ways. Oracle: the
``mollie-api-python`` client fetches the same payments from the same fake as our client, with the
same request; its own test fixture (tests/responses/payment_single.json) is a peer vector. Through
the app: stored once under concurrent duplicates, refusals store nothing, no fetch → no handler."""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import prometheus_client
import pytest
from flask import Flask
from mollie.api.client import Client

from tests.conftest import admin_headers, base_config, drain, make_app, rows, wait_until
from tests.fake_apis import serve
from webhooks.errors import ConfigError, PayloadError, VerificationError
from webhooks.providers import mollie_api
from webhooks.providers.api import FetchError, MismatchError, Missing, UnknownObjectError
from webhooks.providers.base import Endpoint, Request
from webhooks.providers.mollie import CLASSIC_TYPE, CLASSIC_WINDOW, Mollie

PAYLOADS = Path(__file__).parents[1] / "payloads" / "mollie"
PROVIDER = Mollie()
KEY = (
    "test_dHar4XY7LxsDOtmnkVtjNVWXLSlXsM"  # the shape of Mollie's test keys (docs.mollie.com/reference/authentication)
)
SECRET = "mollie-signing-secret"
NOW = 1_700_000_000
ORACLE_EVENTS = 220
# mollie/mollie-api-python tests/responses/payment_single.json: the SDK's own fetched payment
SDK_PAYMENT = json.loads((PAYLOADS / "payment__sdk_payment_single.json").read_text())
SIGNED_BODY = (PAYLOADS / "payment-link.paid__signed.json").read_bytes()


def classic(name: str = "mollie", **options: Any) -> Endpoint:
    return Endpoint(name, "mollie", (), options={"api_key": KEY, **options})


def signed_endpoint(*secrets: str) -> Endpoint:
    return Endpoint("mollie", "mollie", secrets or (SECRET,))


def reason(request: Request, endpoint: Endpoint) -> str:
    try:
        PROVIDER.verify(request, endpoint, now=NOW)
    except VerificationError as exc:
        return str(exc.reason)
    return "ok"


class FakeMollie:
    """Mollie's payments API: the payments it holds, and every request it was asked."""

    def __init__(self) -> None:
        self.payments: dict[str, dict[str, Any]] = {}
        self.seen: list[tuple[str, str | None]] = []
        self.status = 200
        self.lock = threading.Lock()

    def route(self, method: str, path: str, query: Any, headers: Any, body: bytes) -> tuple[int, Any]:
        with self.lock:
            self.seen.append((path, headers.get("Authorization")))
        found = self.payments.get(path.removeprefix("/v2/payments/"))
        if self.status != 200:
            return self.status, {"status": self.status, "title": "Error"}
        return (200, found) if found else (404, {"status": 404, "title": "Not Found"})


@pytest.fixture
def fake() -> Iterator[tuple[FakeMollie, str]]:
    api = FakeMollie()
    with serve(api.route) as base:
        yield api, base


# -- classic: the body only names a payment -------------------------------------------------------


def test_classic_delivery_is_a_named_payment_in_its_minute() -> None:
    body = (PAYLOADS / "payment__classic.txt").read_bytes()
    sent, headers = PROVIDER.sign(classic(), body, now=NOW)
    assert (sent, headers["Content-Type"]) == (body, "application/x-www-form-urlencoded")
    (event,) = PROVIDER.verify(Request({}, body), classic(), now=NOW).events
    window = NOW // CLASSIC_WINDOW * CLASSIC_WINDOW
    assert (event.event_id, event.event_type, event.object_id) == (
        f"tr_WDqYK6vllg@{window}",
        CLASSIC_TYPE,
        "tr_WDqYK6vllg",
    )
    later = PROVIDER.verify(Request({}, body), classic(), now=NOW + CLASSIC_WINDOW).events[0]
    assert later.event_id != event.event_id  # a later nudge fetches the then-current state
    assert PROVIDER.event_data(body, None) == {"id": "tr_WDqYK6vllg"}
    assert PROVIDER.extract(CLASSIC_TYPE, {"id": "tr_WDqYK6vllg"}) is None  # nothing delivered is state


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"id=",
        b"id=ord_1234",
        b"id=tr_1&status=paid",
        b"id=tr_1&id=tr_2",
        b"status=paid",
        b'{"id": "tr_1"}',
        b"id=tr_\xff",
        b"id=tr_1%00",
        b"id=tr_" + b"a" * 65,
    ],
)
def test_classic_bodies_that_name_no_single_payment_are_refused(body: bytes) -> None:
    with pytest.raises(PayloadError):
        PROVIDER.verify(Request({}, body), classic(), now=NOW)


def test_start_up_fails_closed() -> None:
    with pytest.raises(ConfigError, match="classic Mollie webhooks sign nothing"):
        PROVIDER.validate(Endpoint("m", "mollie", ()))
    for key in ("sk_live_x", "test_short", "live_" + "a" * 30 + "!", 42):
        with pytest.raises(ConfigError, match="not a Mollie key"):
            PROVIDER.validate(Endpoint("m", "mollie", (), options={"api_key": key}))
    for base in (
        "https://api.mollie.com.evil.example",
        "http://api.mollie.com",
        "https://example.com",
        "https://api.mollie.com/v2",
    ):
        with pytest.raises(ConfigError, match="api_base"):
            PROVIDER.validate(classic(api_base=base))
    with pytest.raises(ConfigError, match="empty secret"):
        PROVIDER.validate(Endpoint("m", "mollie", ("",)))
    PROVIDER.validate(classic())
    PROVIDER.validate(classic(api_base="http://127.0.0.1:8080"))
    PROVIDER.validate(classic(api_key="access_" + "x" * 40))
    PROVIDER.validate(signed_endpoint())


# -- the fetch: our client and the SDK, over randomized payments ------------------------------------


def random_payment(rng: random.Random) -> dict[str, Any]:
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    payment_id = "tr_" + "".join(rng.choices(alphabet, k=rng.randrange(6, 16)))
    return {
        **SDK_PAYMENT,
        "id": payment_id,
        "status": rng.choice(["open", "pending", "authorized", "paid", "canceled", "expired", "failed"]),
        "amount": {"value": f"{rng.randrange(1, 100000) / 100:.2f}", "currency": rng.choice(["EUR", "GBP", "USD"])},
        "description": "".join(rng.choices('Order é€😀"\\/ #123', k=rng.randrange(0, 30))),
        "metadata": {"order_id": str(rng.getrandbits(32))},
    }


def test_our_fetch_and_the_sdks_agree_over_randomized_payments(fake: tuple[FakeMollie, str]) -> None:
    api, base = fake
    rng = random.Random(7)
    sdk = Client(api_endpoint=base, retry=0)
    sdk.set_api_key(KEY)
    disagreements = 0
    for n in range(ORACLE_EVENTS):
        payment = SDK_PAYMENT if n == 0 else random_payment(rng)  # the SDK's own fixture first
        api.payments = {payment["id"]: payment}
        api.seen.clear()
        ours = mollie_api.payment(classic(f"mollie-oracle-{n}", api_base=base), payment["id"])
        theirs = dict(sdk.payments.get(payment["id"]))
        ok = ours == theirs == payment and api.seen[0][0] == api.seen[1][0] == f"/v2/payments/{payment['id']}"
        disagreements += not (ok and api.seen[0][1] == api.seen[1][1] == f"Bearer {KEY}")
    assert disagreements == 0


def test_refetch_acts_only_on_mollies_copy(fake: tuple[FakeMollie, str]) -> None:
    api, base = fake
    api.payments = {SDK_PAYMENT["id"]: SDK_PAYMENT}
    endpoint = classic("mollie-refetch", api_base=base)
    data, ref = PROVIDER.refetch(endpoint, CLASSIC_TYPE, {"id": SDK_PAYMENT["id"]}, None)
    assert data == SDK_PAYMENT and ref is not None
    assert (ref.type, ref.id, ref.state) == ("payment", SDK_PAYMENT["id"], SDK_PAYMENT)
    assert PROVIDER.describe_version(ref.version).startswith("fetched from Mollie 20")  # type: ignore[union-attr]
    _, again = PROVIDER.refetch(endpoint, CLASSIC_TYPE, {"id": SDK_PAYMENT["id"]}, None)
    assert again is not None and again.version > ref.version  # fetched later: outranks
    with pytest.raises(MismatchError, match="no payment"):
        PROVIDER.refetch(endpoint, CLASSIC_TYPE, {"id": "tr_unknown"}, None)
    api.payments = {"tr_other": {**SDK_PAYMENT, "id": "tr_7UhSN1zuXS"}}
    with pytest.raises(MismatchError, match="not that payment"):
        mollie_api.payment(endpoint, "tr_other")
    api.status = 503
    with pytest.raises(FetchError, match="503"):
        mollie_api.payment(endpoint, "tr_other")
    with pytest.raises(FetchError, match="Mollie"):
        mollie_api.payment(classic("mollie-down", api_base="http://127.0.0.1:9"), "tr_x")


# -- signed webhooks: the documented HMAC, both ways --------------------------------------------


def documented(secret: str, body: bytes) -> str:
    """docs.mollie.com/reference/best-practices: HMAC-SHA256 of the raw body with the shared secret."""
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def random_event(rng: random.Random) -> bytes:
    entity = rng.choice(["payment-link", "payment", "sales-invoice", "balance-transaction"])
    event = {
        "resource": "event",
        "id": f"event_{rng.getrandbits(64):x}",
        "type": f"{entity}.{rng.choice(['paid', 'created', 'canceled', 'issued'])}",
        "entityId": f"{entity[:2]}_{rng.getrandbits(48):x}",
        "createdAt": f"20{rng.randrange(20, 30)}-0{rng.randrange(1, 10)}-1{rng.randrange(10)}T1{rng.randrange(10)}:0{rng.randrange(10)}:00.0Z",
        "_embedded": {"entity": {"resource": entity, "description": "".join(rng.choices('ab é€😀"\\\n', k=12))}},
    }
    return json.dumps(event, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 2])).encode()


def test_signed_webhooks_agree_with_the_documented_hmac_both_ways() -> None:
    rng = random.Random(11)
    disagreements = 0
    for _ in range(ORACLE_EVENTS):
        secret, body = "".join(rng.choices("abcdefXYZ0123456789_-", k=rng.randrange(16, 48))), random_event(rng)
        ep = signed_endpoint(secret)
        _, headers = PROVIDER.sign(ep, body, now=NOW)
        ours_accepted = headers["X-Mollie-Signature"] == f"sha256={documented(secret, body)}"
        theirs = {"x-mollie-signature": f"sha256={documented(secret, body)}"}
        bare = {"x-mollie-signature": documented(secret, body)}
        accepted = reason(Request(theirs, body), ep) == reason(Request(bare, body), ep) == "ok"
        disagreements += not (ours_accepted and accepted)
    assert disagreements == 0


def test_signed_event_id_type_and_object() -> None:
    result = PROVIDER.verify(
        Request({"x-mollie-signature": documented(SECRET, SIGNED_BODY)}, SIGNED_BODY), signed_endpoint(), now=NOW
    )
    ((event,), scheme) = result.events, result.scheme
    assert (event.event_id, event.event_type, event.object_id, scheme) == (
        "event_GvJ8WHrp5isUdRub9CJyH",
        "payment-link.paid",
        "pl_qng5gbbv8NAZ5gpM5ZYgx",
        "mollie-sha256",
    )
    ref = PROVIDER.extract(event.event_type, json.loads(SIGNED_BODY))
    assert ref is not None and (ref.type, ref.id, ref.state["resource"]) == (
        "payment-link",
        "pl_qng5gbbv8NAZ5gpM5ZYgx",
        "payment-link",
    )
    assert PROVIDER.describe_version(ref.version) == "event created 2024-12-16 15:57:04 UTC"
    assert PROVIDER.refetch(signed_endpoint(), event.event_type, {"x": 1}, ref) == (
        {"x": 1},
        ref,
    )  # signed: as delivered


def test_signed_failures_name_their_reason() -> None:
    good = {"x-mollie-signature": f"sha256={documented(SECRET, SIGNED_BODY)}"}
    assert reason(Request(good, SIGNED_BODY.replace(b"paid", b"open", 1)), signed_endpoint()) == "signature_mismatch"
    assert reason(Request(good, SIGNED_BODY), signed_endpoint("other")) == "signature_mismatch"
    assert reason(Request({}, SIGNED_BODY), signed_endpoint()) == "missing_signature"
    assert reason(Request({}, b"id=tr_WDqYK6vllg"), signed_endpoint()) == "missing_signature"  # no classic once signed
    assert reason(Request({"x-mollie-signature": "sha256=zz"}, SIGNED_BODY), signed_endpoint()) == "malformed_signature"
    rotated = PROVIDER.verify(Request(good, SIGNED_BODY), signed_endpoint("old", SECRET), now=NOW)
    assert rotated.events[0].secret_index == 1


# -- through the app ----------------------------------------------------------------------------


@pytest.fixture
def classic_app(sqlite_url: str, fake: tuple[FakeMollie, str]) -> tuple[Flask, FakeMollie]:
    api, base = fake
    api.payments = {SDK_PAYMENT["id"]: SDK_PAYMENT}
    endpoints = {
        "mollie": {"provider": "mollie", "api_key": "env:MOLLIE_TEST_KEY", "api_base": base},
        "mollie_signed": {"provider": "mollie", "secrets": [SECRET]},
    }
    config = base_config(sqlite_url, MOLLIE_TEST_KEY=KEY, WEBHOOKS_MAX_ATTEMPTS="2", ENDPOINTS=endpoints)
    return make_app(config), api


def post(app: Flask, body: bytes, headers: dict[str, str] | None = None, name: str = "mollie") -> tuple[int, Any]:
    response = app.test_client().post(f"/webhooks/{name}", data=body, headers=headers or {})
    return response.status_code, response.get_json()


def events(app: Flask, name: str = "mollie") -> list[tuple[str, str, str | None]]:
    return [tuple(r) for r in rows(app, "SELECT event_id, status, last_error FROM events WHERE endpoint = :n", n=name)]


def away_from_a_window_edge() -> None:
    """Concurrent duplicates must all arrive in one minute: start with 20 s of it left."""
    wait_until(lambda: time.time() % CLASSIC_WINDOW < CLASSIC_WINDOW - 20, timeout=30)


def test_classic_is_stored_once_and_processed_from_the_fetched_payment(classic_app: tuple[Flask, FakeMollie]) -> None:
    app, api = classic_app
    body = f"id={SDK_PAYMENT['id']}".encode()
    away_from_a_window_edge()
    with ThreadPoolExecutor(10) as pool:
        answers = list(
            pool.map(lambda _: post(app, body, {"Content-Type": "application/x-www-form-urlencoded"})[0], range(10))
        )
    assert answers == [200] * 10
    assert api.seen == []  # nothing is fetched on the request path
    drain(app)
    ((event_id, status, _),) = events(app)
    assert event_id.startswith(f"{SDK_PAYMENT['id']}@") and status in ("processed", "ignored")
    assert api.seen == [(f"/v2/payments/{SDK_PAYMENT['id']}", f"Bearer {KEY}")]
    obj = app.test_client().get(f"/admin/api/objects/mollie/payment/{SDK_PAYMENT['id']}", headers=admin_headers())
    assert obj.get_json()["state"] == SDK_PAYMENT


def rejections_metric(name: str = "mollie") -> float:
    labels = {"endpoint": name, "reason": "unknown_object"}
    return prometheus_client.REGISTRY.get_sample_value("webhooks_rejections_total", labels) or 0.0


def test_nudges_for_a_payment_mollie_does_not_have_cost_one_call_and_page_no_one(
    sqlite_url: str, fake: tuple[FakeMollie, str]
) -> None:
    """The attack: 400 nudges naming one payment Mollie does not have, then 20 replays of the event
    (each a new fetch on main): one call to Mollie, and the event ends ``ignored``, never ``failed``."""
    api, base = fake
    endpoints = {
        "mollie": {
            "provider": "mollie",
            "api_key": KEY,
            "api_base": base,
            "rate_limit": 10_000,  # the flood is let in: the cost of what is stored is measured
            "sender_rate_limit": 10_000,
        }
    }
    app = make_app(base_config(sqlite_url, WEBHOOKS_MAX_ATTEMPTS="3", ENDPOINTS=endpoints))
    before = rejections_metric()
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: post(app, b"id=tr_forged1")[0], range(400)))
    assert answers == [200] * 400  # anyone may post a name; nothing is acted on unfetched
    drain(app)
    stored = events(app)
    assert {(status, error) for _, status, error in stored} == {("ignored", "unknown_object")}
    client = app.test_client()
    for _ in range(20):
        event_id = stored[0][0]
        answer = client.post(f"/admin/api/events/mollie/{event_id}/replay", headers=admin_headers(), json={})
        assert answer.status_code == 202
        drain(app)
    assert api.seen == [("/v2/payments/tr_forged1", f"Bearer {KEY}")]  # one call: the 404 is remembered
    assert {(status, error) for _, status, error in events(app)} == {("ignored", "unknown_object")}
    assert rows(app, "SELECT count(*) FROM objects") == [(0,)]
    attempts = rows(app, "SELECT status, error, handlers FROM attempts WHERE endpoint = 'mollie'")
    assert attempts and {tuple(a[:2]) for a in attempts} == {("ignored", "unknown_object")}
    counted = len(stored) + 20  # each attempt that found no payment is one rejection
    assert rows(app, "SELECT count FROM rejection_counts WHERE reason = 'unknown_object'") == [(counted,)]
    assert rejections_metric() - before == counted
    listed = client.get("/admin/api/rejections", headers=admin_headers()).get_json()
    assert listed["counts"]["mollie"]["unknown_object"] == counted
    assert client.get("/admin/api/events?status=failed", headers=admin_headers()).get_json()["events"] == []


def test_many_lookups_of_one_unknown_payment_cost_one_call_for_a_minute(fake: tuple[FakeMollie, str]) -> None:
    api, base = fake
    endpoint = classic("mollie-missing", api_base=base)
    for _ in range(400):
        with pytest.raises(UnknownObjectError, match="no payment"):
            PROVIDER.refetch(endpoint, CLASSIC_TYPE, {"id": "tr_unknown1"}, None)
    assert len(api.seen) == 1
    api.payments = {"tr_unknown2": {**SDK_PAYMENT, "id": "tr_unknown2"}}
    assert PROVIDER.refetch(endpoint, CLASSIC_TYPE, {"id": "tr_unknown2"}, None)[0]["id"] == "tr_unknown2"
    assert len(api.seen) == 2  # another id is asked for
    # A signed endpoint's 404 (Mercado Pago's signed id) is not remembered: each is a failure.
    signed = Endpoint("mollie-missing", "mollie", (SECRET,), options={"api_key": KEY, "api_base": base})
    for _ in range(2):
        with pytest.raises(MismatchError) as raised:
            mollie_api.payment(signed, "tr_unknown3")
        assert not isinstance(raised.value, UnknownObjectError)
    assert len(api.seen) == 4


def test_the_memory_of_unknown_objects_expires_and_is_bounded() -> None:
    now = [0.0]
    missing = Missing(ttl=60, size=3, clock=lambda: now[0])
    missing.add(("e", "a"))
    now[0] = 59.9
    assert ("e", "a") in missing
    now[0] = 60.0
    assert ("e", "a") not in missing  # asked again after the ttl
    for name in "bcde":
        missing.add(("e", name))
    assert ("e", "b") not in missing and all(("e", n) in missing for n in "cde")  # the oldest forgotten
    assert len(missing.until) == 3


def test_api_errors_are_retried_then_failed(classic_app: tuple[Flask, FakeMollie]) -> None:
    app, api = classic_app
    api.status = 500
    assert post(app, f"id={SDK_PAYMENT['id']}".encode())[0] == 200
    drain(app)
    ((_, status, error),) = events(app)
    assert status == "failed" and "answered 500" in str(error)
    assert len(api.seen) == 2  # WEBHOOKS_MAX_ATTEMPTS


def test_refusals_store_nothing_and_name_their_reason(classic_app: tuple[Flask, FakeMollie]) -> None:
    app, _ = classic_app
    assert post(app, b"id=tr_1&status=paid") == (400, {"error": "malformed_payload"})
    good = {"X-Mollie-Signature": f"sha256={documented(SECRET, SIGNED_BODY)}"}
    tampered = SIGNED_BODY.replace(b"paid", b"open", 1)
    assert post(app, tampered, good, "mollie_signed") == (400, {"error": "signature_mismatch"})
    foreign = {"X-Mollie-Signature": documented("not-ours", SIGNED_BODY)}
    assert post(app, SIGNED_BODY, foreign, "mollie_signed") == (400, {"error": "signature_mismatch"})
    assert post(app, SIGNED_BODY, {}, "mollie_signed") == (400, {"error": "missing_signature"})
    assert events(app) == events(app, "mollie_signed") == []


def test_a_relabelled_delivery_is_no_second_event(classic_app: tuple[Flask, FakeMollie]) -> None:
    app, _ = classic_app
    good = {"X-Mollie-Signature": f"sha256={documented(SECRET, SIGNED_BODY)}", "Content-Type": "application/json"}
    assert post(app, SIGNED_BODY, good, "mollie_signed")[0] == 200
    relabelled = {**good, "User-Agent": "other", "X-Request-Id": "2", "Content-Type": "text/plain"}
    assert post(app, SIGNED_BODY, relabelled, "mollie_signed?x=1")[0] == 200
    assert [e[0] for e in events(app, "mollie_signed")] == ["event_GvJ8WHrp5isUdRub9CJyH"]
    away_from_a_window_edge()
    body = f"id={SDK_PAYMENT['id']}".encode()
    assert (
        post(app, body, {"User-Agent": "a"})[0]
        == post(app, body, {"User-Agent": "b", "X-Id": "2"}, "mollie?y=2")[0]
        == 200
    )
    assert len(events(app)) == 1


def test_a_signed_event_is_processed_as_delivered_without_any_fetch(classic_app: tuple[Flask, FakeMollie]) -> None:
    app, api = classic_app
    good = {"X-Mollie-Signature": f"sha256={documented(SECRET, SIGNED_BODY)}"}
    assert post(app, SIGNED_BODY, good, "mollie_signed")[0] == 200
    drain(app)
    ((_, status, _),) = events(app, "mollie_signed")
    assert status in ("processed", "ignored") and api.seen == []
    obj = app.test_client().get(
        "/admin/api/objects/mollie_signed/payment-link/pl_qng5gbbv8NAZ5gpM5ZYgx", headers=admin_headers()
    )
    assert obj.get_json()["state"] == json.loads(SIGNED_BODY)["_embedded"]["entity"]


def test_the_fetched_payment_file_is_what_handlers_see(fake: tuple[FakeMollie, str]) -> None:
    api, base = fake
    paid = json.loads((PAYLOADS / "payment__fetched_paid.json").read_text())
    api.payments = {paid["id"]: paid}
    data, ref = PROVIDER.refetch(classic("mollie-paid", api_base=base), CLASSIC_TYPE, {"id": paid["id"]}, None)
    assert data == paid and ref is not None and ref.state["status"] == "paid"
