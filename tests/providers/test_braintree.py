"""Braintree: braintree-python's own webhook tests as peer vectors, ``WebhookNotification.parse`` and
``WebhookTesting.sample_notification`` as oracles both ways over randomized notifications, payload
files, one test per failure rule, the GET challenge, and through the app: stored once under
concurrent duplicates, refusals store nothing, a re-labelled signature is no second event."""

from __future__ import annotations

import base64
import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

import braintree
import pytest
from braintree.exceptions.invalid_challenge_error import InvalidChallengeError
from braintree.exceptions.invalid_signature_error import InvalidSignatureError
from flask import Flask

from tests.conftest import base_config, make_app, rows
from webhooks.errors import ConfigError, VerificationError
from webhooks.providers.base import Endpoint, Request
from webhooks.providers.braintree import Braintree, mac

PAYLOADS = Path(__file__).parents[1] / "payloads" / "braintree"
PROVIDER = Braintree()
# braintree/braintree_python tests/test_helper.py configures these keys for its unit tests.
SDK_PUBLIC, SDK_PRIVATE = "integration_public_key", "integration_private_key"
SECRET = "bt_pub_1:bt-private-key-0001"
ORACLE_EVENTS = 250
KINDS = [
    "subscription_charged_successfully",
    "subscription_went_past_due",
    "subscription_canceled",
    "transaction_settled",
    "transaction_settlement_declined",
    "transaction_disbursed",
    "dispute_opened",
    "dispute_won",
    "dispute_lost",
    "disbursement",
    "sub_merchant_account_approved",
    "check",
]


def endpoint(*secrets: str) -> Endpoint:
    return Endpoint("braintree", "braintree", secrets or (SECRET,))


def gateway(public: str, private: str) -> braintree.BraintreeGateway:
    return braintree.BraintreeGateway(
        braintree.Configuration(braintree.Environment.Sandbox, "merchant", public, private)
    )


def form(signature: str, payload: str | bytes) -> bytes:
    text = payload.decode() if isinstance(payload, bytes) else payload
    return urlencode({"bt_signature": signature, "bt_payload": text}).encode()


def fields(body: bytes) -> tuple[str, str]:
    parsed = parse_qs(body.decode())
    return parsed["bt_signature"][0], parsed["bt_payload"][0]


def outcome(body: bytes, ep: Endpoint, now: float | None = None) -> str:
    try:
        PROVIDER.verify(Request({}, body), ep, now=time.time() if now is None else now)
    except VerificationError as exc:
        return str(exc.reason)
    return "ok"


def sdk_accepts(gw: braintree.BraintreeGateway, signature: str, payload: str) -> bool:
    try:
        gw.webhook_notification.parse(signature, payload)
    except InvalidSignatureError:
        return False
    return True


# -- braintree-python's own webhook tests (tests/unit/test_webhooks.py) as peer vectors ------------


def test_sdk_vector_challenge() -> None:
    """test_verify_returns_a_correct_challenge_response: the challenge and its answer, byte for byte."""
    challenge = "20f9f8ed05f77439fe955c977e4c8a53"
    expected = "integration_public_key|d9b899556c966b3f06945ec21311865d35df3ce4"
    assert gateway(SDK_PUBLIC, SDK_PRIVATE).webhook_notification.verify(challenge) == expected
    request = Request({}, b"", f"https://example.com/webhooks/braintree?bt_challenge={challenge}", method="GET")
    result = PROVIDER.verify(request, endpoint(f"{SDK_PUBLIC}:{SDK_PRIVATE}"), now=0)
    assert result.events == [] and result.reply is not None
    assert (result.reply.body, result.reply.content_type, result.reply.status) == (expected.encode(), "text/plain", 200)


@pytest.mark.parametrize("challenge", ["bad challenge", "20F9F8ED05F77439FE955C977E4C8A53", "abc", "", "0" * 33])
def test_sdk_vector_invalid_challenge_is_refused_by_both(challenge: str) -> None:
    """test_verify_raises_when_challenge_is_invalid (and the bounds of its ``^[a-f0-9]{20,32}$``)."""
    with pytest.raises(InvalidChallengeError):
        gateway(SDK_PUBLIC, SDK_PRIVATE).webhook_notification.verify(challenge)
    url = "https://example.com/webhooks/braintree?" + urlencode({"bt_challenge": challenge})
    with pytest.raises(VerificationError) as refused:
        PROVIDER.verify(Request({}, b"", url, method="GET"), endpoint(), now=0)
    assert refused.value.reason == "malformed_payload"


def test_sdk_vector_sample_notification_parses() -> None:
    """test_sample_notification_builds_a_parsable_notification (and its with-a-newline retry)."""
    sample = gateway(SDK_PUBLIC, SDK_PRIVATE).webhook_testing.sample_notification("subscription_went_past_due", "my_id")
    ep = endpoint(f"{SDK_PUBLIC}:{SDK_PRIVATE}")
    body = form(sample["bt_signature"], sample["bt_payload"])
    event = PROVIDER.verify(Request({}, body), ep, now=time.time()).events[0]
    assert (event.event_type, event.object_id) == ("subscription_went_past_due", "my_id")
    trimmed = form(sample["bt_signature"], sample["bt_payload"].rstrip())  # test_parse_retries_payload_with_a_newline
    again = PROVIDER.verify(Request({}, trimmed), ep, now=time.time()).events[0]
    assert again.event_id == event.event_id  # one notification, one id, however it is padded


@pytest.mark.parametrize(
    ("mangle", "reason"),
    [
        (lambda s, p: ("bad_stuff", p), "malformed_signature"),  # test_completely_invalid_signature
        (lambda s, p: (s, b"badstuff" + p), "signature_mismatch"),  # test_invalid_signature_when_payload_modified
        (lambda s, p: (s, b"~* invalid! *~"), "malformed_signature"),  # ...contains_invalid_characters
    ],
    ids=["invalid-signature", "payload-modified", "illegal-characters"],
)
def test_sdk_vector_refusals(mangle: Any, reason: str) -> None:
    sample = gateway(SDK_PUBLIC, SDK_PRIVATE).webhook_testing.sample_notification("subscription_went_past_due", "my_id")
    signature, payload = mangle(sample["bt_signature"], sample["bt_payload"])
    assert not sdk_accepts(gateway(SDK_PUBLIC, SDK_PRIVATE), signature, payload)
    assert outcome(form(signature, payload), endpoint(f"{SDK_PUBLIC}:{SDK_PRIVATE}")) == reason


def test_sdk_vector_wrong_public_key() -> None:
    """test_parse_raises_when_public_key_is_wrong: "no matching public key"."""
    sample = gateway(SDK_PUBLIC, SDK_PRIVATE).webhook_testing.sample_notification("subscription_went_past_due", "my_id")
    assert not sdk_accepts(
        gateway("wrong_public_key", "wrong_private_key"), sample["bt_signature"], sample["bt_payload"]
    )
    body = form(sample["bt_signature"], sample["bt_payload"])
    assert outcome(body, endpoint("wrong_public_key:wrong_private_key")) == "signature_mismatch"


# -- the SDK as oracle, both ways, over randomized notifications ---------------------------------


def test_sdk_oracle_both_ways_over_randomized_notifications() -> None:
    """SDK-signed (``sample_notification``) → we accept, with its kind and subject id; ours signs →
    ``parse`` accepts; mangled either way → both refuse: 0 disagreements over 250 notifications."""
    rng = random.Random(20261202)
    disagreements = []
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    for n in range(ORACLE_EVENTS):
        public = "".join(rng.choices(alphabet + "_", k=rng.randrange(8, 24)))
        private = "".join(rng.choices(alphabet + "!@#-_ ", k=rng.randrange(1, 40))).strip() or "k"
        gw, ep = gateway(public, private), endpoint(f"{public}:{private}")
        kind, object_id = rng.choice(KINDS), "".join(rng.choices(alphabet, k=rng.randrange(4, 12)))
        sample = gw.webhook_testing.sample_notification(kind, object_id)
        theirs = PROVIDER.verify(Request({}, form(sample["bt_signature"], sample["bt_payload"])), ep, now=time.time())
        if theirs.events[0].event_type != kind:
            disagreements.append((n, "kind", kind))
        xml = base64.decodebytes(sample["bt_payload"])
        ours_body, _ = PROVIDER.sign(ep, xml, now=time.time())
        signature, payload = fields(ours_body)
        if not sdk_accepts(gw, signature, payload):
            disagreements.append((n, "sdk refused ours", kind))
        case = rng.choice(["genuine", "payload", "secret", "signature", "public"])
        sent_sig, sent_payload, key = signature, payload, ep
        if case == "payload":
            sent_payload = base64.encodebytes(xml.replace(b"<kind>", b"<kind>x", 1)).decode()
        elif case == "signature":
            sent_sig = signature[:-1] + ("0" if signature[-1] != "0" else "1")
        elif case == "secret":
            gw, key = gateway(public, private + "x"), endpoint(f"{public}:{private}x")
        elif case == "public":
            gw, key = gateway(public + "x", private), endpoint(f"{public}x:{private}")
        sdk = sdk_accepts(gw, sent_sig, sent_payload)
        ours = outcome(form(sent_sig, sent_payload), key)
        if sdk != (ours == "ok") or (case != "genuine" and ours == "ok"):
            disagreements.append((n, case, ours))
    assert disagreements == []


# -- payload files, rotation, the id ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kind", "object_type", "object_id", "updated"),
    [
        (
            "subscription_charged_successfully__monthly.xml",
            "subscription_charged_successfully",
            "subscription",
            "dbq6tw",
            "2024-05-01T09:59:58Z",
        ),
        (
            "transaction_settled__us_bank_account.xml",
            "transaction_settled",
            "transaction",
            "7hx2kqzp",
            "2024-05-02T14:29:41Z",
        ),
        ("dispute_opened__chargeback.xml", "dispute_opened", "dispute", "9qde5qgp", "2024-05-03T08:14:41Z"),
    ],
)
def test_payload_files(name: str, kind: str, object_type: str, object_id: str, updated: str) -> None:
    now = time.time()
    body, headers = PROVIDER.sign(endpoint(), (PAYLOADS / name).read_bytes(), now=now)
    assert headers == {"Content-Type": "application/x-www-form-urlencoded"}
    (event,) = PROVIDER.verify(Request({}, body), endpoint(), now=now).events
    assert (event.event_type, event.object_id, event.signed_at) == (kind, object_id, int(now))
    data = PROVIDER.event_data(body, None)
    ref = PROVIDER.extract(event.event_type, data)
    assert ref is not None and (ref.type, ref.id) == (object_type, object_id)
    assert PROVIDER.describe_version(ref.version) == "updated " + updated.replace("T", " ").replace("Z", " UTC")
    assert PROVIDER.amount(body, None) is None  # decimal strings: no minor units claimed


def test_the_check_notification_has_no_object() -> None:
    body, _ = PROVIDER.sign(endpoint(), (PAYLOADS / "check__control_panel.xml").read_bytes(), now=time.time())
    (event,) = PROVIDER.verify(Request({}, body), endpoint(), now=time.time()).events
    assert event.event_type == "check" and PROVIDER.extract("check", PROVIDER.event_data(body, None)) is None
    assert PROVIDER.event_data(body, None)["subject"] == {"check": True}


def test_rotation_records_the_matching_key_pair() -> None:
    xml = (PAYLOADS / "transaction_settled__us_bank_account.xml").read_bytes()
    pairs = ("old_pub:old-private", "new_pub:new-private")
    for index in (0, 1):
        body, _ = PROVIDER.sign(endpoint(*pairs), xml, now=time.time(), secret_index=index)
        assert PROVIDER.verify(Request({}, body), endpoint(*pairs), now=time.time()).events[0].secret_index == index


def test_both_pairs_of_a_rotating_merchant_are_read() -> None:
    """Braintree signs with every API key: ``bt_signature`` holds one ``pub|hex`` pair per key."""
    xml = (PAYLOADS / "transaction_settled__us_bank_account.xml").read_bytes()
    body, _ = PROVIDER.sign(endpoint("new_pub:new-private"), xml, now=time.time())
    signature, payload = fields(body)
    both = form("old_pub|" + "0" * 40 + "&" + signature, payload)
    assert outcome(both, endpoint("new_pub:new-private")) == "ok"
    assert outcome(both, endpoint("old_pub:old-private")) == "signature_mismatch"


def test_the_id_is_a_hash_of_the_signed_notification_so_no_replay_key() -> None:
    now = time.time()
    body, _ = PROVIDER.sign(endpoint(), (PAYLOADS / "dispute_opened__chargeback.xml").read_bytes(), now=now)
    signature, payload = fields(body)
    first = PROVIDER.verify(Request({}, body), endpoint(), now=now)
    relabelled = form("other_pub|" + "f" * 40 + "&" + signature, payload)  # unsigned: the other pairs
    second = PROVIDER.verify(Request({}, relabelled, "https://elsewhere.example/x"), endpoint(), now=now)
    assert first.events[0].event_id == second.events[0].event_id
    assert first.events[0].event_id.startswith("sha256:") and first.replay_key is None


@pytest.mark.parametrize(
    "secrets",
    [(), ("",), ("no-colon",), (":private",), ("public:",), ("pub lic:private",), ("pub|x:private",), ("pub: priv",)],
)
def test_a_key_pair_is_required_at_start_up(secrets: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError, match="'braintree'"):
        PROVIDER.validate(Endpoint("braintree", "braintree", secrets))


def test_a_key_pair_is_accepted() -> None:
    PROVIDER.validate(endpoint(SECRET, f"{SDK_PUBLIC}:{SDK_PRIVATE}"))


NOW = 1_700_000_000.0  # every check below passes its own `now`: a fixed instant, never a reading of the clock
BODY, _ = PROVIDER.sign(endpoint(), (PAYLOADS / "subscription_charged_successfully__monthly.xml").read_bytes(), now=NOW)
SIG, PAYLOAD = fields(BODY)


def resigned(xml: bytes) -> bytes:
    """``xml`` signed as-is (no timestamp rewritten)."""
    payload = base64.encodebytes(xml).decode()
    public, private = SECRET.split(":")
    return form(f"{public}|{mac(private, payload.encode())}", payload)


@pytest.mark.parametrize(
    ("body", "now", "reason"),
    [
        (urlencode({"bt_payload": PAYLOAD}).encode(), NOW, "missing_signature"),
        (urlencode({"bt_signature": SIG}).encode(), NOW, "missing_signature"),
        (form(SIG.replace("|", "-"), PAYLOAD), NOW, "malformed_signature"),
        (form(SIG, PAYLOAD.replace("A", "B", 1)), NOW, "signature_mismatch"),
        (form(SIG[:-1] + ("0" if SIG[-1] != "0" else "1"), PAYLOAD), NOW, "signature_mismatch"),
        (form(SIG, PAYLOAD + "*"), NOW, "malformed_signature"),
        (BODY + b"&bt_payload=QQ==", NOW, "malformed_signature"),
        (form("&".join([SIG] * 17), PAYLOAD), NOW, "too_many_signatures"),
        (b"&".join([BODY] + [b"x=1"] * 16), NOW, "too_many_parameters"),
        (BODY, NOW + 3 * 86400, "timestamp_out_of_tolerance"),
        (BODY, NOW - 600, "timestamp_out_of_tolerance"),
        (resigned(b"<notification><kind>k</kind></notification>"), NOW, "malformed_payload"),
        (
            resigned(b"<notification><timestamp>2024-05-01T00:00:00Z</timestamp></notification>"),
            NOW,
            "malformed_payload",
        ),
        (resigned(b"not xml"), NOW, "malformed_payload"),
        (resigned(b'<!DOCTYPE n [<!ENTITY a "aaaa">]><notification>&a;</notification>'), NOW, "malformed_payload"),
        (b"\xff\xfe", NOW, "malformed_signature"),
    ],
    ids=[
        "no-signature",
        "no-payload",
        "no-pair",
        "payload-changed",
        "signature-changed",
        "illegal-character",
        "payload-twice",
        "too-many-pairs",
        "too-many-fields",
        "stale",
        "from-the-future",
        "no-timestamp",
        "no-kind",
        "not-xml",
        "entities",
        "not-ascii",
    ],
)
def test_failures(body: bytes, now: float, reason: str) -> None:
    assert outcome(body, endpoint(), now=now) == reason


def test_wrong_secret_is_refused() -> None:
    assert outcome(BODY, endpoint("bt_pub_1:another-private-key"), now=NOW) == "signature_mismatch"


# -- through the app: the challenge, stored once, refusals store nothing, re-labels ----------------


@pytest.fixture
def bt_app(sqlite_url: str) -> Flask:
    return make_app(base_config(sqlite_url, ENDPOINTS={"braintree": {"provider": "braintree", "secrets": [SECRET]}}))


def post(app: Flask, body: bytes, path: str = "/webhooks/braintree") -> tuple[int, Any]:
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    response = app.test_client().post(path, data=body, headers=headers)
    return response.status_code, response.get_json()


def stored(app: Flask) -> list[tuple[str, str]]:
    return [tuple(r) for r in rows(app, "SELECT event_id, event_type FROM events WHERE endpoint = 'braintree'")]


def test_the_get_challenge_is_answered_and_never_stored(bt_app: Flask) -> None:
    challenge = "20f9f8ed05f77439fe955c977e4c8a53"
    response = bt_app.test_client().get(f"/webhooks/braintree?bt_challenge={challenge}")
    expected = gateway("bt_pub_1", "bt-private-key-0001").webhook_notification.verify(challenge)
    assert (response.status_code, response.get_data(as_text=True)) == (200, expected)
    assert response.headers["Content-Type"] == "text/plain"
    refused = bt_app.test_client().get("/webhooks/braintree?bt_challenge=not-hex")
    assert (refused.status_code, refused.get_json()) == (400, {"error": "malformed_payload"})
    assert bt_app.test_client().get("/webhooks/braintree").status_code == 400
    assert stored(bt_app) == []
    assert bt_app.test_client().get("/webhooks/stripe").status_code == 405  # other kinds answer no GET


def test_ten_concurrent_duplicates_are_stored_once(bt_app: Flask) -> None:
    body, _ = PROVIDER.sign(endpoint(), (PAYLOADS / "dispute_opened__chargeback.xml").read_bytes(), now=time.time())
    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda _: post(bt_app, body)[0], range(10)))
    assert answers == [200] * 10
    event_id = PROVIDER.verify(Request({}, body), endpoint(), now=time.time()).events[0].event_id
    assert stored(bt_app) == [(event_id, "dispute_opened")]


def test_refusals_store_nothing_and_name_their_reason(bt_app: Flask) -> None:
    xml = (PAYLOADS / "transaction_settled__us_bank_account.xml").read_bytes()
    body, _ = PROVIDER.sign(endpoint(), xml, now=time.time())
    signature, payload = fields(body)
    foreign, _ = PROVIDER.sign(endpoint("bt_pub_1:not-our-key"), xml, now=time.time())
    stale, _ = PROVIDER.sign(endpoint(), xml, now=time.time() - 3 * 86400)
    assert post(bt_app, form(signature, payload.replace("A", "B", 1))) == (400, {"error": "signature_mismatch"})
    assert post(bt_app, foreign) == (400, {"error": "signature_mismatch"})
    assert post(bt_app, stale) == (400, {"error": "timestamp_out_of_tolerance"})
    assert post(bt_app, urlencode({"bt_payload": payload}).encode()) == (400, {"error": "missing_signature"})
    assert stored(bt_app) == []


def test_a_relabelled_capture_is_no_second_event(bt_app: Flask) -> None:
    body, _ = PROVIDER.sign(endpoint(), (PAYLOADS / "dispute_opened__chargeback.xml").read_bytes(), now=time.time())
    signature, payload = fields(body)
    assert post(bt_app, body)[0] == 200
    for n in range(3):  # what the signature does not cover: other pairs, the payload's trailing newline, the URL
        relabelled = form(f"pub{n}|{'e' * 40}&{signature}", payload.rstrip("\n") if n == 1 else payload)
        assert post(bt_app, relabelled, f"/webhooks/braintree?n={n}")[0] == 200
    assert len(stored(bt_app)) == 1 and stored(bt_app)[0][1] == "dispute_opened"


def test_the_signed_timestamp_bounds_replays_to_the_retry_horizon() -> None:
    """``webhooks purge`` never keeps events for less than ``retry_horizon``; a capture older than
    that is refused, so a purged notification never comes back as new."""
    horizon = PROVIDER.retry_horizon.total_seconds()
    assert outcome(BODY, endpoint(), now=int(NOW) + horizon - 1) == "ok"
    assert outcome(BODY, endpoint(), now=int(NOW) + horizon + 1) == "timestamp_out_of_tolerance"
