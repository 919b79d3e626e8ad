"""Slack: the SL1 vector, slack_sdk oracle both ways, payload files, failures, rotation."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from slack_sdk.signature import Clock, SignatureVerifier

from webhooks.errors import VerificationError
from webhooks.providers.base import Endpoint, Request
from webhooks.providers.slack import Slack

PAYLOADS = Path(__file__).parents[1] / "payloads" / "slack"
PROVIDER = Slack()
SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
SL1_TS = 1531420618
SL1_SIGNATURE = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
NOW = SL1_TS


class FixedClock(Clock):
    def now(self) -> float:
        return NOW


def endpoint(*secrets: str) -> Endpoint:
    return Endpoint("slack", "slack", secrets or (SECRET,))


def signed(body: bytes, *, secret: str = SECRET, now: float = NOW, **extra: str) -> Request:
    """The one correct signing helper every negative case starts from."""
    _, headers = PROVIDER.sign(endpoint(secret), body, now=now)
    return Request({k.lower(): v for k, v in {**headers, **extra}.items() if v}, body)


def test_official_vector_sl1() -> None:
    body = (PAYLOADS / "slash_command__sl1.txt").read_bytes()
    req = Request({"x-slack-signature": SL1_SIGNATURE, "x-slack-request-timestamp": str(SL1_TS)}, body)
    event = PROVIDER.verify(req, endpoint(), now=SL1_TS).events[0]
    assert (event.event_type, event.event_id) == ("slash_command", "sha256:" + hashlib.sha256(body).hexdigest())
    assert (event.secret_index, event.signed_at) == (0, SL1_TS)
    assert PROVIDER.event_data(body, None)["command"] == "/webhook-collect"
    assert signed(body).header("X-Slack-Signature") == SL1_SIGNATURE


def test_events_api_callback() -> None:
    body = (PAYLOADS / "app_mention__event_callback.json").read_bytes()
    result = PROVIDER.verify(signed(body), endpoint(), now=NOW)
    assert [(e.event_id, e.event_type) for e in result.events] == [("Ev123ABC456", "app_mention")]
    assert result.reply is None


def test_url_verification_answers_the_challenge_and_stores_nothing() -> None:
    body = (PAYLOADS / "url_verification__challenge.json").read_bytes()
    result = PROVIDER.verify(signed(body), endpoint(), now=NOW)
    assert result.events == [] and result.reply is not None
    assert json.loads(result.reply.body) == {"challenge": json.loads(body)["challenge"]}
    assert result.reply.content_type == "application/json"


def test_interactivity_form() -> None:
    body = (PAYLOADS / "block_actions__button.txt").read_bytes()
    event = PROVIDER.verify(signed(body), endpoint(), now=NOW).events[0]
    assert event.event_type == "block_actions"
    assert PROVIDER.event_data(body, None)["payload"]["actions"][0]["action_id"] == "approve"


@pytest.mark.parametrize("name", sorted(p.name for p in PAYLOADS.iterdir()))
def test_sdk_signs_we_verify(name: str) -> None:
    body = (PAYLOADS / name).read_bytes()
    signature = SignatureVerifier(SECRET).generate_signature(timestamp=str(NOW), body=body)
    assert signature is not None
    req = Request({"x-slack-signature": signature, "x-slack-request-timestamp": str(NOW)}, body)
    PROVIDER.verify(req, endpoint(), now=NOW)


@pytest.mark.parametrize("name", sorted(p.name for p in PAYLOADS.iterdir()))
def test_we_sign_sdk_verifies(name: str) -> None:
    body = (PAYLOADS / name).read_bytes()
    _, headers = PROVIDER.sign(endpoint(), body, now=NOW)
    assert SignatureVerifier(SECRET, clock=FixedClock()).is_valid_request(body, headers)


def test_rotation() -> None:
    body = (PAYLOADS / "app_mention__event_callback.json").read_bytes()
    for index, secret in enumerate(("old", "new")):
        event = PROVIDER.verify(signed(body, secret=secret), endpoint("old", "new"), now=NOW).events[0]
        assert event.secret_index == index


BODY = (PAYLOADS / "app_mention__event_callback.json").read_bytes()


@pytest.mark.parametrize(
    ("req", "reason"),
    [
        (signed(BODY, **{"X-Slack-Signature": ""}), "missing_signature"),
        (signed(BODY, **{"X-Slack-Request-Timestamp": ""}), "missing_signature"),
        (signed(BODY, **{"X-Slack-Signature": "v1=" + "00" * 32}), "malformed_signature"),
        (signed(BODY, **{"X-Slack-Signature": "v0=xyz"}), "malformed_signature"),
        (Request(signed(BODY).headers, BODY.replace(b"Ev123", b"Ev999")), "signature_mismatch"),
        (signed(BODY, **{"X-Slack-Request-Timestamp": str(NOW + 1)}), "signature_mismatch"),
        (signed(BODY, now=NOW - 301), "timestamp_out_of_tolerance"),
        (signed(BODY, now=NOW + 301), "timestamp_out_of_tolerance"),
        (signed(b"{not json"), "malformed_payload"),
        (signed(b"just=a&form=body"), "malformed_payload"),
    ],
    ids=[
        "no-signature",
        "no-timestamp",
        "wrong-version",
        "not-hex",
        "body-changed",
        "timestamp-changed",
        "too-old",
        "too-new",
        "bad-json",
        "unknown-form",
    ],
)
def test_failures(req: Request, reason: str) -> None:
    with pytest.raises(VerificationError) as exc:
        PROVIDER.verify(req, endpoint(), now=NOW)
    assert exc.value.reason == reason
