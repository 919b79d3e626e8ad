"""Mailgun: vectors from the documented formula, payload files, extract, one test per failure rule,
signature shapes (the signature sits in the body), the token as replay key, and the same through
the app: one signature never becomes a second event, whatever event data it arrives with.

Mailgun ships no Python verifier, and its docs' example signature object comes without its key:
the vector below is that example's timestamp and token signed by the documented formula with
``hmac`` alone (never with our module), and pinned.
Docs: https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/securing-webhooks
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import string
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from tests.conftest import drain, rows, runtime
from tests.support.catalogue import genuine
from tests.support.delivering import at_once, kinds_app, post, stored
from webhooks.errors import ConfigError, PayloadError, VerificationError
from webhooks.providers.base import Endpoint, Request, replay_key
from webhooks.providers.mailgun import Mailgun
from webhooks.store.purge import Plan, purge

PAYLOADS = Path(__file__).parents[1] / "payloads" / "mailgun"
PROVIDER = Mailgun()
KEY = "mailgun-signing-key"
DOCS_TIMESTAMP = "1529006854"  # the docs' example signature object
DOCS_TOKEN = "a8ce0edb2dd8301dee6c2405235584e45aa91d1e9f979f3de0"
DOCS_SIGNATURE_WITH_KEY = "ea25a18a69b376dbf3bddc72c0387b89e67c91e021fb2c210d3a071505629b09"
NOW = int(DOCS_TIMESTAMP)
ORIGINAL = "CPgfbmQMTCKtHW6uIWtuVe"  # delivered__basic.json's event id


def endpoint(*secrets: str) -> Endpoint:
    return Endpoint(
        "mailgun", "mailgun", secrets or (KEY,), options={"api_key": "key-mailgun", "domain": "mg.example.com"}
    )


def signed(body: bytes, *, key: str = KEY, at: int = NOW) -> Request:
    """The one correct signing helper every negative case starts from."""
    body, headers = PROVIDER.sign(endpoint(key), body, now=at)
    return Request({k.lower(): v for k, v in headers.items()}, body)


def with_signature(body: bytes, **fields: Any) -> bytes:
    data = json.loads(body)
    data["signature"] = {**data.get("signature", {}), **fields}
    return json.dumps(data).encode()


def reason(body: bytes, now: int = NOW) -> str:
    with pytest.raises(VerificationError) as exc:
        PROVIDER.verify(Request({}, body), endpoint(), now=now)
    return exc.value.reason


def by_formula(key: str, timestamp: str, token: str) -> str:
    return hmac.new(key.encode(), (timestamp + token).encode(), hashlib.sha256).hexdigest()


DELIVERED = (PAYLOADS / "delivered__basic.json").read_bytes()


# -- documented-formula vectors ----------------------------------------------------------------------


def test_vector_docs_example_signed_with_a_known_key() -> None:
    assert by_formula(KEY, DOCS_TIMESTAMP, DOCS_TOKEN) == DOCS_SIGNATURE_WITH_KEY
    body = with_signature(DELIVERED, signature=DOCS_SIGNATURE_WITH_KEY)
    assert json.loads(body)["signature"]["token"] == DOCS_TOKEN
    result = PROVIDER.verify(Request({}, body), endpoint(), now=NOW)
    event = result.events[0]
    assert (event.event_id, event.event_type, event.signed_at) == ("CPgfbmQMTCKtHW6uIWtuVe", "delivered", NOW)
    assert event.object_id == "20130503182626.18666.16540@sandbox.mailgun.org"
    assert result.replay_key == replay_key("mailgun", DOCS_TOKEN)


def test_the_docs_example_as_published_does_not_verify_with_another_key() -> None:
    assert reason(DELIVERED) == "signature_mismatch"  # its key is Mailgun's example account's, not ours


def test_randomized_events_agree_with_the_formula() -> None:
    """No SDK exists: 300 random events and keys, signed by ``sign``, checked by the formula alone."""
    rng = random.Random(20240523)
    for _ in range(300):
        key = "".join(rng.choice(string.hexdigits.lower()) for _ in range(32))
        at = rng.randint(1_500_000_000, 2_000_000_000)
        text = "".join(rng.choice(string.printable + "é€😀") for _ in range(rng.randint(1, 30)))
        event = {"event-data": {"id": text, "event": rng.choice(["delivered", "opened", "failed"]), "timestamp": at}}
        body = json.dumps(event, ensure_ascii=rng.random() < 0.5).encode()
        out = PROVIDER.sign(endpoint(key), body, now=at)[0]
        sig = json.loads(out)["signature"]
        assert sig["signature"] == by_formula(key, sig["timestamp"], sig["token"]) and sig["timestamp"] == str(at)
        assert PROVIDER.verify(Request({}, out), endpoint(key), now=at).events[0].event_id == text
        by_hand = with_signature(body, timestamp=str(at), token=text, signature=by_formula(key, str(at), text))
        assert PROVIDER.verify(Request({}, by_hand), endpoint(key), now=at).replay_key == replay_key("mailgun", text)


# -- payloads and extract ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "event_type", "message_id"),
    [
        ("delivered__basic.json", "delivered", "20130503182626.18666.16540@sandbox.mailgun.org"),
        ("failed__permanent.json", "failed", "20130503192659.13651.20287@sandbox.mailgun.org"),
        ("opened__basic.json", "opened", "20130503182626.18666.16540@sandbox.mailgun.org"),
    ],
)
def test_payload_files(name: str, event_type: str, message_id: str) -> None:
    request = signed((PAYLOADS / name).read_bytes())
    event = PROVIDER.verify(request, endpoint(), now=NOW).events[0]
    data = json.loads(request.body)
    assert (event.event_id, event.event_type) == (data["event-data"]["id"], event_type)
    ref = PROVIDER.extract(event_type, PROVIDER.event_data(request.body, None))
    assert ref is not None and (ref.type, ref.id) == ("message", message_id)
    assert ref.version == int(data["event-data"]["timestamp"] * 1000)


def test_version_orders_a_messages_events() -> None:
    delivered = PROVIDER.extract("delivered", json.loads(DELIVERED))
    opened = PROVIDER.extract("opened", json.loads((PAYLOADS / "opened__basic.json").read_bytes()))
    assert delivered and opened and delivered.id == opened.id and opened.version < delivered.version
    assert PROVIDER.describe_version(delivered.version) == "event at 2018-03-19 15:11:02.908 UTC"
    assert PROVIDER.extract("x", {"event-data": {"id": "e", "timestamp": 1.5}}) is None  # no message id


# -- one test per failure rule -------------------------------------------------------------------------


@pytest.mark.parametrize("body", [b"", b"not json", b"[]", b'{"event-data": {}}', b'{"signature": {}}'])
def test_missing_signature(body: bytes) -> None:
    assert reason(body) == "missing_signature"


@pytest.mark.parametrize(
    "fields",
    [
        {"signature": "zz"},
        {"signature": 5},
        {"token": ""},
        {"token": ["a"]},
        {"timestamp": 1529006854},
        {"timestamp": "1.5"},
        {"token": "t" * 256},
    ],
)
def test_malformed_signature(fields: dict[str, Any]) -> None:
    assert reason(with_signature(signed(DELIVERED).body, **fields)) == "malformed_signature"


def test_wrong_key_and_moved_token_or_timestamp() -> None:
    assert reason(signed(DELIVERED, key="wrong").body) == "signature_mismatch"
    body = signed(DELIVERED).body
    token = json.loads(body)["signature"]["token"]
    assert reason(with_signature(body, token=token[:-1] + ("0" if token[-1] != "0" else "1"))) == "signature_mismatch"
    assert reason(with_signature(body, timestamp=str(NOW + 1)), now=NOW) == "signature_mismatch"


@pytest.mark.parametrize("skew", [-301, 301, 8 * 3600])
def test_stale_or_future_timestamp(skew: int) -> None:
    assert reason(signed(DELIVERED).body, now=NOW + skew) == "timestamp_out_of_tolerance"


def test_the_event_data_is_not_signed_so_the_token_is_the_replay_key() -> None:
    """The documented weakness, made visible: event data edited under a genuine signature still
    verifies, with the same replay key, so the receiver keeps it to one event."""
    body = signed(DELIVERED).body
    data = json.loads(body)
    data["event-data"].update(id="minted", event="failed")
    first = PROVIDER.verify(Request({}, body), endpoint(), now=NOW)
    second = PROVIDER.verify(Request({}, json.dumps(data).encode()), endpoint(), now=NOW)
    assert second.events[0].event_id == "minted" and second.replay_key == first.replay_key is not None


def test_signature_shapes_never_verify() -> None:
    """Empty, truncated, extended and wrong-length signatures (test_signature_shapes.py's set)."""
    body = signed(DELIVERED).body
    real = bytes.fromhex(json.loads(body)["signature"]["signature"])
    other = bytes.fromhex(json.loads(signed(DELIVERED, key="other").body)["signature"]["signature"])
    for bad in [b"", real[:1], real[: len(real) // 2], real[:-1], real + b"\x00", real + real, real[1:], other]:
        assert reason(with_signature(body, signature=bad.hex())) in ("signature_mismatch", "malformed_signature")


def test_rotation_reports_the_matching_key() -> None:
    event = PROVIDER.verify(signed(DELIVERED), endpoint("old", KEY), now=NOW).events[0]
    assert event.secret_index == 1


@pytest.mark.parametrize("event_data", [None, {}, {"id": "e1"}, {"event": "delivered"}, {"id": "", "event": "x"}])
def test_genuine_but_unidentifiable_is_malformed_payload(event_data: Any) -> None:
    with pytest.raises(PayloadError):
        PROVIDER.verify(signed(json.dumps({"event-data": event_data}).encode()), endpoint(), now=NOW)


def test_sign_needs_a_json_object() -> None:
    with pytest.raises(ValueError):
        PROVIDER.sign(endpoint(), b"[]", now=NOW)


@pytest.mark.parametrize("secrets", [(), ("",), (" padded",), (KEY, "")])
def test_start_up_refuses_a_missing_or_malformed_key(secrets: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError, match="'mailgun'"):
        PROVIDER.validate(replace(endpoint(), secrets=secrets))
    PROVIDER.validate(endpoint())


@pytest.mark.parametrize("options", [{}, {"api_key": "key-mailgun"}, {"domain": "mg.example.com"}])
def test_start_up_refuses_an_endpoint_that_cannot_fetch_mailguns_copy(options: dict[str, str]) -> None:
    """The event data is unsigned: without the Events API nothing could check it (fail closed)."""
    with pytest.raises(ConfigError, match="api_key and domain are required"):
        PROVIDER.validate(replace(endpoint(), options=options))


# -- through the app -----------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def kinds(request: pytest.FixtureRequest) -> Flask:
    return kinds_app(request)


def replays_counted(app: Flask) -> int:
    found = rows(app, "SELECT count FROM rejection_counts WHERE endpoint = 'mailgun' AND reason = 'replayed_signature'")
    return int(found[0][0]) if found else 0


def test_ten_concurrent_duplicates_are_stored_once(kinds: Flask) -> None:
    body, headers, path = genuine(kinds, "mailgun")
    assert at_once(kinds, path, body, headers) == [200] * 10
    assert stored(kinds, "mailgun") == [("CPgfbmQMTCKtHW6uIWtuVe", "delivered")]


def test_a_relabelled_signature_is_never_a_second_event(kinds: Flask) -> None:
    body, headers, path = genuine(kinds, "mailgun")
    assert post(kinds, path, body, headers)[0] == 200
    data = json.loads(body)
    relabels = [{"id": "minted-1"}, {"id": "minted-2", "event": "failed"}, {"id": ORIGINAL, "event": "complained"}]
    for change in relabels:
        data["event-data"].update(change)
        assert post(kinds, path, json.dumps(data).encode(), headers)[0] == 200  # answered like a duplicate
    assert stored(kinds, "mailgun") == [("CPgfbmQMTCKtHW6uIWtuVe", "delivered")]
    assert replays_counted(kinds) == 2  # a new id is a replay; the same id is a plain duplicate


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ("wrong key", "signature_mismatch"),
        ("stale timestamp", "timestamp_out_of_tolerance"),
        ("token edited", "signature_mismatch"),
        ("no signature", "missing_signature"),
    ],
)
def test_refused_with_its_reason_and_nothing_stored(kinds: Flask, change: str, code: str) -> None:
    body, headers, path = genuine(kinds, "mailgun")
    endpoint_ = kinds.extensions["webhooks"].settings.endpoints["mailgun"]
    at = int(json.loads(body)["signature"]["timestamp"])
    if change == "wrong key":
        body = PROVIDER.sign(replace(endpoint_, secrets=("not-the-key",)), DELIVERED, now=at)[0]
    elif change == "stale timestamp":
        body = PROVIDER.sign(endpoint_, DELIVERED, now=at - 3600)[0]
    elif change == "token edited":
        body = with_signature(body, token="f" * 50)
    else:
        body = json.dumps({"event-data": json.loads(body)["event-data"]}).encode()
    status, answer = post(kinds, path, body, headers)
    assert status in (400, 401) and answer == {"error": code}
    assert stored(kinds, "mailgun") == []


def test_the_token_stays_spent_after_purge(kinds: Flask) -> None:
    body, headers, path = genuine(kinds, "mailgun")
    assert post(kinds, path, body, headers)[0] == 200
    drain(kinds)
    rt = runtime(kinds)
    assert purge(rt.sessions, Plan(timedelta(0), timedelta(0)), kinds=set(), force=True) == 1
    token = json.loads(body)["signature"]["token"]
    assert rows(kinds, "SELECT replay_key FROM tombstones") == [(replay_key("mailgun", token),)]
    data = json.loads(body)
    data["event-data"]["id"] = "minted-after-purge"
    assert post(kinds, path, json.dumps(data).encode(), headers)[0] == 200
    drain(kinds)
    assert stored(kinds, "mailgun") == []
