"""Zoom: vectors from the documented formula, the URL-validation handshake, payload files, extract,
one test per failure rule, rotation, start-up checks, and the same through the app.

Zoom ships no Python verifier. Its docs give the formula and example bodies but no signed values:
the vectors below are the docs' bodies signed by that formula, computed with ``hmac`` alone (never
with our module), and pinned.
Docs: https://developers.zoom.us/docs/api/webhooks/#verify-webhook-events
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import string
from dataclasses import replace
from pathlib import Path

import pytest
from flask import Flask

from tests.support.catalogue import genuine
from tests.support.delivering import at_once, kinds_app, post, stored
from webhooks.errors import ConfigError, PayloadError, VerificationError
from webhooks.providers.base import Endpoint, Request
from webhooks.providers.zoom import Zoom, encrypted_token

PAYLOADS = Path(__file__).parents[1] / "payloads" / "zoom"
PROVIDER = Zoom()
SECRET = "zoom-secret-token"
STARTED_AT = 1626230691
STARTED_SIGNATURE = "v0=d3d2cff365fc480d2f4ead852301a4a70371d8d526158434df4cc336ad054046"
VALIDATION_AT = 1654503849
VALIDATION_SIGNATURE = "v0=fd1376db6cb3f4672c7ade33cc13700261143da5fd8058e52b5dd50c8bf002fe"
PLAIN_TOKEN = "qgg8vlvZRS6UYooatFL8Aw"  # the docs' example
ENCRYPTED = "d9e0d764a78494688ba3f2d5c0ed4ca311394b4834d959759213424d2df961e3"


def endpoint(*secrets: str) -> Endpoint:
    return Endpoint("zoom", "zoom", secrets or (SECRET,))


def signed(body: bytes, *, secret: str = SECRET, at: int = STARTED_AT) -> Request:
    """The one correct signing helper every negative case starts from."""
    _, headers = PROVIDER.sign(endpoint(secret), body, now=at)
    return Request({k.lower(): v for k, v in headers.items()}, body)


def reason(request: Request, now: int = STARTED_AT) -> str:
    with pytest.raises(VerificationError) as exc:
        PROVIDER.verify(request, endpoint(), now=now)
    return exc.value.reason


def by_formula(secret: str, timestamp: int, body: bytes) -> str:
    return "v0=" + hmac.new(secret.encode(), f"v0:{timestamp}:".encode() + body, hashlib.sha256).hexdigest()


# -- documented-formula vectors ----------------------------------------------------------------------


def test_vector_meeting_started() -> None:
    body = (PAYLOADS / "meeting.started__basic.json").read_bytes()
    assert by_formula(SECRET, STARTED_AT, body) == STARTED_SIGNATURE
    request = Request({"x-zm-signature": STARTED_SIGNATURE, "x-zm-request-timestamp": str(STARTED_AT)}, body)
    event = PROVIDER.verify(request, endpoint(), now=STARTED_AT).events[0]
    assert event.event_id == "sha256:" + hashlib.sha256(body).hexdigest()
    assert (event.event_type, event.object_id, event.signed_at) == ("meeting.started", "1234567890", STARTED_AT)
    assert signed(body).header("x-zm-signature") == STARTED_SIGNATURE


def test_vector_url_validation_is_answered_and_stores_nothing() -> None:
    body = (PAYLOADS / "endpoint.url_validation__challenge.json").read_bytes()
    assert by_formula(SECRET, VALIDATION_AT, body) == VALIDATION_SIGNATURE
    request = Request({"x-zm-signature": VALIDATION_SIGNATURE, "x-zm-request-timestamp": str(VALIDATION_AT)}, body)
    result = PROVIDER.verify(request, endpoint(), now=VALIDATION_AT)
    assert result.events == [] and result.reply is not None and result.reply.status == 200
    assert json.loads(result.reply.body) == {"plainToken": PLAIN_TOKEN, "encryptedToken": ENCRYPTED}
    assert encrypted_token(SECRET, PLAIN_TOKEN) == ENCRYPTED


def test_url_validation_is_answered_with_the_secret_that_verified() -> None:
    body = (PAYLOADS / "endpoint.url_validation__challenge.json").read_bytes()
    result = PROVIDER.verify(signed(body, at=VALIDATION_AT), endpoint("old-token", SECRET), now=VALIDATION_AT)
    assert result.reply is not None and json.loads(result.reply.body)["encryptedToken"] == ENCRYPTED


def test_url_validation_without_a_valid_signature_is_never_answered() -> None:
    body = (PAYLOADS / "endpoint.url_validation__challenge.json").read_bytes()
    assert reason(Request({}, body), VALIDATION_AT) == "missing_signature"
    assert reason(signed(body, secret="other", at=VALIDATION_AT), VALIDATION_AT) == "signature_mismatch"
    with pytest.raises(PayloadError):
        PROVIDER.verify(signed(b'{"event": "endpoint.url_validation", "payload": {}}'), endpoint(), now=STARTED_AT)


def test_randomized_events_agree_with_the_formula() -> None:
    """No SDK exists: 300 random bodies, keys and times, signed by ``sign`` and by the formula alone."""
    rng = random.Random(20240522)
    for _ in range(300):
        secret = "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(22))
        at = rng.randint(1_500_000_000, 2_000_000_000)
        text = "".join(rng.choice(string.printable + "é€😀") for _ in range(rng.randint(0, 40)))
        event = {"event": f"meeting.{text[:5] or 'x'}", "event_ts": at * 1000, "payload": {"object": {"id": text}}}
        body = json.dumps(event, ensure_ascii=rng.random() < 0.5).encode()
        _, headers = PROVIDER.sign(endpoint(secret), body, now=at)
        assert headers["x-zm-signature"] == by_formula(secret, at, body)
        request = Request({"x-zm-signature": by_formula(secret, at, body), "x-zm-request-timestamp": str(at)}, body)
        assert PROVIDER.verify(request, endpoint(secret), now=at).events[0].event_type == event["event"]
        tampered = Request(request.headers, body + b" ")
        with pytest.raises(VerificationError):
            PROVIDER.verify(tampered, endpoint(secret), now=at)


# -- payloads and extract ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "event_type"),
    [
        ("meeting.started__basic.json", "meeting.started"),
        ("meeting.ended__basic.json", "meeting.ended"),
        ("meeting.participant_joined__basic.json", "meeting.participant_joined"),
    ],
)
def test_payload_files(name: str, event_type: str) -> None:
    body = (PAYLOADS / name).read_bytes()
    event = PROVIDER.verify(signed(body), endpoint(), now=STARTED_AT).events[0]
    assert event.event_type == event_type
    ref = PROVIDER.extract(event_type, PROVIDER.event_data(body, None))
    assert ref is not None and (ref.type, ref.id, ref.version) == (
        "meeting",
        "1234567890",
        json.loads(body)["event_ts"],
    )


def test_version_is_event_ts() -> None:
    started = PROVIDER.extract("meeting.started", json.loads((PAYLOADS / "meeting.started__basic.json").read_bytes()))
    ended = PROVIDER.extract("meeting.ended", json.loads((PAYLOADS / "meeting.ended__basic.json").read_bytes()))
    assert started and ended and started.version < ended.version
    assert PROVIDER.describe_version(ended.version) == "event at 2021-07-14 03:44:51.572 UTC"
    assert PROVIDER.extract("meeting.started", {"event": "x", "payload": {"object": {"id": "1"}}}) is None


# -- one test per failure rule -------------------------------------------------------------------------

BODY = (PAYLOADS / "meeting.started__basic.json").read_bytes()


def test_missing_signature_or_timestamp() -> None:
    request = signed(BODY)
    assert reason(Request({"x-zm-request-timestamp": str(STARTED_AT)}, BODY)) == "missing_signature"
    assert reason(Request({"x-zm-signature": request.headers["x-zm-signature"]}, BODY)) == "missing_signature"


@pytest.mark.parametrize("value", ["d3d2", "v1=" + "ab" * 32, "v0=zz", "v0"])
def test_malformed_signature(value: str) -> None:
    request = Request({"x-zm-signature": value, "x-zm-request-timestamp": str(STARTED_AT)}, BODY)
    assert reason(request) == "malformed_signature"


def test_tampered_body_and_wrong_secret() -> None:
    assert reason(Request(signed(BODY).headers, BODY.replace(b"My Meeting", b"Our Meeting"))) == "signature_mismatch"
    assert reason(signed(BODY, secret="wrong")) == "signature_mismatch"


@pytest.mark.parametrize("skew", [-301, 301, 86_400])
def test_stale_or_future_timestamp(skew: int) -> None:
    assert reason(signed(BODY), now=STARTED_AT + skew) == "timestamp_out_of_tolerance"


def test_a_timestamp_moved_breaks_the_signature() -> None:
    request = signed(BODY)
    moved = Request({**request.headers, "x-zm-request-timestamp": str(STARTED_AT + 1)}, BODY)
    assert reason(moved) == "signature_mismatch"


def test_rotation_reports_the_matching_secret() -> None:
    assert PROVIDER.verify(signed(BODY), endpoint("old", SECRET), now=STARTED_AT).events[0].secret_index == 1


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"payload": {}}', b'{"event": ""}'])
def test_genuine_but_unidentifiable_is_malformed_payload(body: bytes) -> None:
    with pytest.raises(PayloadError):
        PROVIDER.verify(signed(body), endpoint(), now=STARTED_AT)


def test_no_replay_key_the_timestamp_is_signed() -> None:
    assert PROVIDER.verify(signed(BODY), endpoint(), now=STARTED_AT).replay_key is None


@pytest.mark.parametrize("secrets", [(), ("",), (" padded",), (SECRET, "")])
def test_start_up_refuses_a_missing_or_malformed_secret(secrets: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError, match="'zoom'"):
        PROVIDER.validate(replace(endpoint(), secrets=secrets))
    PROVIDER.validate(endpoint())


# -- through the app -----------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def kinds(request: pytest.FixtureRequest) -> Flask:
    return kinds_app(request)


def test_ten_concurrent_duplicates_are_stored_once(kinds: Flask) -> None:
    body, headers, path = genuine(kinds, "zoom")
    assert at_once(kinds, path, body, headers) == [200] * 10
    assert stored(kinds, "zoom") == [("sha256:" + hashlib.sha256(body).hexdigest(), "meeting.started")]


def test_url_validation_through_the_app(kinds: Flask) -> None:
    raw = (PAYLOADS / "endpoint.url_validation__challenge.json").read_bytes()
    body, headers, path = genuine(kinds, "zoom", raw)
    status, answer = post(kinds, path, body, headers)
    assert status == 200 and answer == {
        "plainToken": PLAIN_TOKEN,
        "encryptedToken": encrypted_token("old-zoom-token", PLAIN_TOKEN),
    }
    unsigned = {k: v for k, v in headers.items() if k != "x-zm-signature"}
    assert post(kinds, path, body, unsigned) == (400, {"error": "missing_signature"})
    assert stored(kinds, "zoom") == []


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ("tampered body", "signature_mismatch"),
        ("wrong secret", "signature_mismatch"),
        ("stale timestamp", "timestamp_out_of_tolerance"),
    ],
)
def test_refused_with_its_reason_and_nothing_stored(kinds: Flask, change: str, code: str) -> None:
    body, headers, path = genuine(kinds, "zoom")
    endpoint_ = kinds.extensions["webhooks"].settings.endpoints["zoom"]
    if change == "tampered body":
        body = body.replace(b"My Meeting", b"Our Meeting")
    elif change == "wrong secret":
        headers = PROVIDER.sign(
            replace(endpoint_, secrets=("not-the-secret",)), body, now=int(headers["x-zm-request-timestamp"])
        )[1]
    else:
        headers = PROVIDER.sign(endpoint_, body, now=int(headers["x-zm-request-timestamp"]) - 3600)[1]
    status, answer = post(kinds, path, body, headers)
    assert status in (400, 401) and answer == {"error": code}
    assert stored(kinds, "zoom") == []
