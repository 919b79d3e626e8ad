"""Square: the squareup SDK's own webhook vectors as peer tests, a randomized both-way oracle
against ``square.utils.webhooks_helper.verify_signature``, payload files, extract, one test per
failure rule, the notification URL, rotation and start-up checks."""

from __future__ import annotations

import base64
import json
import random
import string
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from flask import Flask
from square.utils.webhooks_helper import verify_signature

from tests.conftest import drain, rows, runtime
from tests.support.catalogue import genuine
from tests.support.delivering import at_once, kinds_app, post, stored
from webhooks.errors import ConfigError, PayloadError, VerificationError
from webhooks.providers.base import Endpoint, Request, hmac_digest
from webhooks.providers.square import Square
from webhooks.store.purge import Plan, purge

PAYLOADS = Path(__file__).parents[1] / "payloads" / "square"
PROVIDER = Square()
NOW = 1_700_000_000
URL = "https://hooks.example.com/webhooks/square"
KEY = "Ibxx_5AKakO-3qeNVR61Dw"

# square/square-python-sdk tests/integration/test_webhooks_helper.py (the SDK's own vectors)
SDK_BODY = (
    '{"merchant_id":"MLEFBHHSJGVHD","type":"webhooks.test_notification",'
    '"event_id":"ac3ac95b-f97d-458c-a6e6-18981597e05f","created_at":"2022-07-13T20:30:59.037339943Z",'
    '"data":{"type":"webhooks","id":"bc368e64-01aa-407e-b46e-3231809b1129"}}'
)
SDK_SIGNATURE = "GF4YkrJgGBDZ9NIYbNXBnMzqb2HoL4RW/S6vkZ9/2N4="
SDK_KEY = "Ibxx_5AKakO-3qeNVR61Dw"
SDK_URL = "https://webhook.site/679a4f3a-dcfa-49ee-bac5-9d0edad886b9"
SDK_ESCAPED = ('{"data":{"type":"webhooks","id":">id<"}}', "Cxt7+aTi4rKgcA0bC4g9EHdVtLSDWdqccmL5MvihU4U=")


def endpoint(*secrets: str, url: str = URL) -> Endpoint:
    return Endpoint("square", "square", secrets or (KEY,), options={"notification_url": url})


def signed(body: bytes, *, key: str = KEY, url: str = URL, arrive: str = URL) -> Request:
    """The one correct signing helper every negative case starts from."""
    _, headers = PROVIDER.sign(endpoint(key, url=url), body, now=NOW)
    return Request({k.lower(): v for k, v in headers.items()}, body, arrive)


def reason(request: Request, configured: Endpoint | None = None) -> str:
    with pytest.raises(VerificationError) as exc:
        PROVIDER.verify(request, configured or endpoint(), now=NOW)
    return exc.value.reason


# -- the SDK's own vectors, as peer tests ------------------------------------------------------------


def test_sdk_vector_passes() -> None:
    body = (PAYLOADS / "webhooks.test_notification__sdk_vector.json").read_bytes()
    assert body.decode() == SDK_BODY
    request = Request({"x-square-hmacsha256-signature": SDK_SIGNATURE}, body, SDK_URL)
    event = PROVIDER.verify(request, endpoint(SDK_KEY, url=SDK_URL), now=NOW).events[0]
    assert (event.event_id, event.event_type) == ("ac3ac95b-f97d-458c-a6e6-18981597e05f", "webhooks.test_notification")
    assert signed(body, key=SDK_KEY, url=SDK_URL).header("x-square-hmacsha256-signature") == SDK_SIGNATURE


def test_sdk_vector_escaped_body() -> None:
    body, signature = SDK_ESCAPED
    _, headers = PROVIDER.sign(endpoint("signature-key", url="https://webhook.site/webhooks"), body.encode(), now=NOW)
    assert headers["x-square-hmacsha256-signature"] == signature
    assert verify_signature(
        request_body=body,
        signature_header=signature,
        signature_key="signature-key",
        notification_url="https://webhook.site/webhooks",
    )


@pytest.mark.parametrize(
    ("body", "signature", "key", "url"),
    [
        (SDK_BODY, SDK_SIGNATURE, SDK_KEY, "https://webhook.site/79a4f3a-dcfa-49ee-bac5-9d0edad886b9"),  # url mismatch
        (SDK_BODY, SDK_SIGNATURE, "MCmhFRxGX82xMwg5FsaoQA", SDK_URL),  # invalid signature key
        (SDK_BODY, "1z2n3DEJJiUPKcPzQo1ftvbxGdw=", SDK_KEY, SDK_URL),  # invalid signature header
        (SDK_BODY.replace("2022-07-13", "2022-06-13"), SDK_SIGNATURE, SDK_KEY, SDK_URL),  # body mismatch
        (json.dumps(json.loads(SDK_BODY), indent=2), SDK_SIGNATURE, SDK_KEY, SDK_URL),  # body formatted
    ],
)
def test_sdk_negative_vectors(body: str, signature: str, key: str, url: str) -> None:
    assert not verify_signature(request_body=body, signature_header=signature, signature_key=key, notification_url=url)
    request = Request({"x-square-hmacsha256-signature": signature}, body.encode(), url)
    assert reason(request, endpoint(key, url=url)) in ("signature_mismatch", "malformed_signature")


def test_sdk_refuses_an_empty_key_and_so_do_we() -> None:
    with pytest.raises(ValueError, match="signature_key is empty"):
        verify_signature(request_body=SDK_BODY, signature_header=SDK_SIGNATURE, signature_key="", notification_url=URL)
    with pytest.raises(ConfigError):
        PROVIDER.validate(endpoint(""))
    with pytest.raises(ValueError, match="notification_url is empty"):
        verify_signature(request_body=SDK_BODY, signature_header=SDK_SIGNATURE, signature_key=KEY, notification_url="")
    with pytest.raises(ConfigError, match="notification_url"):
        PROVIDER.validate(Endpoint("square", "square", (KEY,)))


# -- the SDK as an oracle, both ways, over randomized events -----------------------------------------

ORACLE_EVENTS = 300


def random_event(rng: random.Random) -> tuple[bytes, str, str]:
    """A random Square-shaped event (unicode, escapes, nesting), a random key and notification URL."""
    text = string.ascii_letters + string.digits + " <>&'\"\\/é€😀\u2028"
    word = lambda n: "".join(rng.choice(text) for _ in range(rng.randint(0, n)))  # noqa: E731
    kind = rng.choice(["payment", "refund", "order", "invoice", "customer", "dispute"])
    state = {word(8) or "k": word(20) for _ in range(rng.randint(0, 6))}
    state["updated_at"] = (
        f"20{rng.randint(10, 39)}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}T10:00:00.{rng.randint(0, 999):03d}Z"
    )
    event = {
        "merchant_id": word(13),
        "type": f"{kind}.{rng.choice(['created', 'updated'])}",
        "event_id": f"{rng.getrandbits(128):032x}",
        "created_at": state["updated_at"],
        "data": {"type": kind, "id": word(30) or "x", "object": {kind: state}},
    }
    body = json.dumps(event, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 2])).encode()
    key = "".join(rng.choice(string.ascii_letters + string.digits + "-_") for _ in range(22))
    url = f"https://{word(0) or 'h'}{rng.randint(0, 999)}.example.com/{rng.choice(['sq', 'webhooks/square', 'a/b?c=1&d=%2F'])}"
    return body, key, url


def sdk_accepts(body: bytes, signature: str, key: str, url: str) -> bool:
    return verify_signature(
        request_body=body.decode(), signature_header=signature, signature_key=key, notification_url=url
    )


def we_accept(body: bytes, signature: str, key: str, url: str) -> bool:
    try:
        PROVIDER.verify(Request({"x-square-hmacsha256-signature": signature}, body), endpoint(key, url=url), now=NOW)
    except (VerificationError, PayloadError):
        return False
    return True


def test_sdk_oracle_both_ways_over_randomized_events() -> None:
    rng = random.Random(20240521)
    disagreements = []
    for n in range(ORACLE_EVENTS):
        body, key, url = random_event(rng)
        ours = PROVIDER.sign(endpoint(key, url=url), body, now=NOW)[1]["x-square-hmacsha256-signature"]
        assert sdk_accepts(body, ours, key, url), f"event {n}: the SDK refused what we signed"  # our sign → SDK
        # The SDK signs nothing: its verdict on each candidate is the oracle of ours, both ways.
        candidates = [
            ours,
            base64.b64encode(hmac_digest(key.encode(), url.encode() + body)).decode(),  # the formula, by hand
            PROVIDER.sign(endpoint(key + "x", url=url), body, now=NOW)[1]["x-square-hmacsha256-signature"],
            PROVIDER.sign(endpoint(key, url=url + "/"), body, now=NOW)[1]["x-square-hmacsha256-signature"],
            PROVIDER.sign(endpoint(key, url=url), body + b" ", now=NOW)[1]["x-square-hmacsha256-signature"],
        ]
        for candidate in candidates:
            if sdk_accepts(body, candidate, key, url) != we_accept(body, candidate, key, url):
                disagreements.append((n, candidate))
    assert disagreements == []


# -- payloads and extract ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "event_type", "object_type", "amount"),
    [
        ("payment.created__basic.json", "payment.created", "payment", (100, "USD")),
        ("payment.updated__completed.json", "payment.updated", "payment", (100, "USD")),
        ("refund.created__basic.json", "refund.created", "refund", (50, "USD")),
        ("webhooks.test_notification__sdk_vector.json", "webhooks.test_notification", "webhooks", None),
    ],
)
def test_payload_files(name: str, event_type: str, object_type: str, amount: tuple[int, str] | None) -> None:
    body = (PAYLOADS / name).read_bytes()
    data = json.loads(body)
    event = PROVIDER.verify(signed(body), endpoint(), now=NOW).events[0]
    assert (event.event_id, event.event_type, event.object_id) == (data["event_id"], event_type, data["data"]["id"])
    ref = PROVIDER.extract(event_type, PROVIDER.event_data(body, None))
    assert ref is not None and (ref.type, ref.id) == (object_type, data["data"]["id"])
    assert PROVIDER.amount(body, None) == amount


def test_version_is_the_states_updated_at() -> None:
    created = (PAYLOADS / "payment.created__basic.json").read_bytes()
    updated = (PAYLOADS / "payment.updated__completed.json").read_bytes()
    first = PROVIDER.extract("payment.created", json.loads(created))
    second = PROVIDER.extract("payment.updated", json.loads(updated))
    assert first and second and first.version < second.version
    assert second.version == 1581024454308 and second.state["status"] == "COMPLETED"
    assert PROVIDER.describe_version(second.version) == "updated 2020-02-06 21:27:34.308 UTC"
    undated = PROVIDER.extract("webhooks.test_notification", json.loads(SDK_BODY))
    assert undated is not None and undated.version == 0  # never replaces a dated state


# -- one test per failure rule -------------------------------------------------------------------------

BODY = (PAYLOADS / "payment.updated__completed.json").read_bytes()


def test_missing_signature() -> None:
    request = signed(BODY)
    assert reason(Request({}, BODY, URL)) == "missing_signature"
    legacy = {"x-square-signature": request.headers["x-square-hmacsha256-signature"]}
    assert reason(Request(legacy, BODY, URL)) == "missing_signature"  # the SHA-1 header is not accepted


@pytest.mark.parametrize("value", ["not base64!", "AAAA", base64.b64encode(b"x" * 20).decode()])
def test_malformed_signature(value: str) -> None:
    assert reason(Request({"x-square-hmacsha256-signature": value}, BODY, URL)) == "malformed_signature"


def test_tampered_body_and_wrong_key() -> None:
    request = signed(BODY)
    assert reason(Request(request.headers, BODY.replace(b"100", b"900", 1), URL)) == "signature_mismatch"
    assert reason(signed(BODY, key="another-key")) == "signature_mismatch"


def test_the_signed_url_is_the_configured_one_never_the_requests() -> None:
    behind_a_proxy = signed(BODY, arrive="http://10.0.0.7:8000/webhooks/square?x=1")
    PROVIDER.verify(behind_a_proxy, endpoint(), now=NOW)
    for_the_host = signed(
        BODY, url="https://evil.example/webhooks/square", arrive="https://evil.example/webhooks/square"
    )
    assert reason(for_the_host) == "url_mismatch"  # verifies only for the request's URL: the config is wrong
    assert reason(signed(BODY, url="https://evil.example/webhooks/square")) == "signature_mismatch"


def test_rotation_reports_the_matching_key() -> None:
    event = PROVIDER.verify(signed(BODY), endpoint("old-key", KEY), now=NOW).events[0]
    assert event.secret_index == 1


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"type": "payment.updated"}', b'{"event_id": "e1"}'])
def test_genuine_but_unidentifiable_is_malformed_payload(body: bytes) -> None:
    with pytest.raises(PayloadError):
        PROVIDER.verify(signed(body), endpoint(), now=NOW)


def test_no_replay_key_the_id_is_signed() -> None:
    assert PROVIDER.verify(signed(BODY), endpoint(), now=NOW).replay_key is None


@pytest.mark.parametrize(
    "options",
    [{}, {"notification_url": ""}, {"notification_url": "/webhooks/square"}, {"notification_url": "ftp://x/y"}],
)
def test_start_up_refuses_a_missing_or_malformed_notification_url(options: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="'square'"):
        PROVIDER.validate(Endpoint("square", "square", (KEY,), options=options))


@pytest.mark.parametrize("secrets", [(), ("",), (" padded ",), (KEY, "")])
def test_start_up_refuses_a_missing_or_malformed_key(secrets: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError, match="'square'"):
        PROVIDER.validate(replace(endpoint(), secrets=secrets))
    PROVIDER.validate(endpoint())


# -- through the app: stored once, refusals store nothing ----------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def kinds(request: pytest.FixtureRequest) -> Flask:
    return kinds_app(request)


def test_ten_concurrent_duplicates_are_stored_once(kinds: Flask) -> None:
    body, headers, path = genuine(kinds, "square")
    assert at_once(kinds, path, body, headers) == [200] * 10
    assert stored(kinds, "square") == [(json.loads(body)["event_id"], "payment.updated")]


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ("tampered body", "signature_mismatch"),
        ("wrong key", "signature_mismatch"),
        ("signed for another URL", "signature_mismatch"),
        ("no signature", "missing_signature"),
    ],
)
def test_refused_with_its_reason_and_nothing_stored(kinds: Flask, change: str, code: str) -> None:
    body, headers, path = genuine(kinds, "square")
    endpoint = kinds.extensions["webhooks"].settings.endpoints["square"]
    if change == "tampered body":
        body = body.replace(b"COMPLETED", b"FAILED")
    elif change == "wrong key":
        headers = PROVIDER.sign(replace(endpoint, secrets=("not-the-key",)), body, now=NOW)[1]
    elif change == "signed for another URL":
        other = replace(endpoint, options={"notification_url": "https://other.example/webhooks/square"})
        headers = PROVIDER.sign(other, body, now=NOW)[1]
    else:
        headers = {k: v for k, v in headers.items() if k != "x-square-hmacsha256-signature"}
    status, answer = post(kinds, path, body, headers)
    assert status in (400, 401) and answer == {"error": code}
    assert stored(kinds, "square") == []


def test_a_captured_delivery_after_purge_is_a_duplicate(kinds: Flask) -> None:
    """No timestamp is signed, so a captured delivery never goes stale: after purge, the signed
    ``event_id``'s tombstone is what keeps it from being stored and run again."""
    body, headers, path = genuine(kinds, "square")
    assert post(kinds, path, body, headers)[0] == 200
    drain(kinds)
    rt = runtime(kinds)
    assert purge(rt.sessions, Plan(timedelta(0), timedelta(0)), kinds=set(), force=True) == 1
    assert rows(kinds, "SELECT endpoint, event_id FROM tombstones") == [("square", json.loads(body)["event_id"])]
    assert post(kinds, path, body, headers)[0] == 200
    drain(kinds)
    assert stored(kinds, "square") == []
