"""Generic HMAC: configured as GitHub, Slack and Shopify it must pass their vectors; options; failures."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from webhooks.errors import ConfigError, VerificationError
from webhooks.providers.base import Endpoint, Request
from webhooks.providers.generic import GenericHmac

PAYLOADS = Path(__file__).parents[1] / "payloads"
PROVIDER = GenericHmac()
NOW = 1_700_000_000
STAMPED = {
    "header": "X-Signature",
    "timestamp_header": "X-Timestamp",
    "algorithm": "sha512",
    "encoding": "base64",
    "id_path": "id",
    "type_path": "type",
}


def endpoint(*secrets: str, **options: Any) -> Endpoint:
    return Endpoint("generic", "hmac", secrets or ("s3cret",), options=options or STAMPED)


def signed(body: bytes, *, secret: str = "s3cret", now: float = NOW, **extra: str) -> Request:
    """The one correct signing helper every negative case starts from."""
    _, headers = PROVIDER.sign(endpoint(secret), body, now=now)
    return Request({k.lower(): v for k, v in {**headers, **extra}.items() if v}, body)


def test_as_github_g1() -> None:
    req = Request(
        {
            "x-hub-signature-256": "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
            "x-github-delivery": "d-1",
        },
        b"Hello, World!",
    )
    options = {"header": "X-Hub-Signature-256", "prefix": "sha256=", "id_header": "X-GitHub-Delivery"}
    event = PROVIDER.verify(req, endpoint("It's a Secret to Everybody", **options), now=NOW).events[0]
    assert (event.event_id, event.event_type, event.secret_index) == ("d-1", "event", 0)


def test_as_slack_sl1() -> None:
    body = (PAYLOADS / "slack" / "slash_command__sl1.txt").read_bytes()
    req = Request(
        {
            "x-slack-signature": "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503",
            "x-slack-request-timestamp": "1531420618",
        },
        body,
    )
    options = {
        "header": "X-Slack-Signature",
        "prefix": "v0=",
        "timestamp_header": "X-Slack-Request-Timestamp",
        "template": "v0:{timestamp}:{body}",
    }
    event = PROVIDER.verify(req, endpoint("8f742231b10e8888abcd99yyyzzz85a5", **options), now=1531420618).events[0]
    assert (event.event_id, event.signed_at) == ("sha256:" + hashlib.sha256(body).hexdigest(), 1531420618)


def test_as_shopify_sh1() -> None:
    req = Request(
        {"x-shopify-hmac-sha256": "plW8VGqq0nDMIEhDqaNNW99asdUCy7EIqLZVcQwtAZ0=", "x-shopify-topic": "orders/create"},
        b'{"id":1}',
    )
    options = {
        "header": "X-Shopify-Hmac-Sha256",
        "encoding": "base64",
        "id_path": "id",
        "type_header": "X-Shopify-Topic",
    }
    event = PROVIDER.verify(req, endpoint("shop-secret", **options), now=NOW).events[0]
    assert (event.event_id, event.event_type) == ("1", "orders/create")


def test_payload_file_with_paths_and_timestamp() -> None:
    body = (PAYLOADS / "hmac" / "invoice.created__basic.json").read_bytes()
    result = PROVIDER.verify(signed(body), endpoint(), now=NOW)
    assert [(e.event_id, e.event_type, e.signed_at) for e in result.events] == [
        ("evt_01HRZ6QW7M2K", "invoice.created", NOW)
    ]
    nested = endpoint(**{**STAMPED, "id_path": "data.id"})
    _, headers = PROVIDER.sign(nested, body, now=NOW)
    assert (
        PROVIDER.verify(Request({k.lower(): v for k, v in headers.items()}, body), nested, now=NOW).events[0].event_id
        == "inv_8812"
    )


def test_template_never_rewrites_the_body() -> None:
    body = b'{"id":"x","type":"t","note":"{timestamp}"}'
    PROVIDER.verify(signed(body), endpoint(), now=NOW)


def test_rotation() -> None:
    body = (PAYLOADS / "hmac" / "invoice.created__basic.json").read_bytes()
    for index, secret in enumerate(("old", "new")):
        event = PROVIDER.verify(signed(body, secret=secret), endpoint("old", "new"), now=NOW).events[0]
        assert event.secret_index == index


BODY = (PAYLOADS / "hmac" / "invoice.created__basic.json").read_bytes()


@pytest.mark.parametrize(
    ("req", "reason"),
    [
        (signed(BODY, **{"X-Signature": ""}), "missing_signature"),
        (signed(BODY, **{"X-Timestamp": ""}), "missing_signature"),
        (signed(BODY, **{"X-Signature": "!!"}), "malformed_signature"),
        (signed(BODY, **{"X-Timestamp": "yesterday"}), "malformed_signature"),  # refused before the HMAC
        (Request(signed(BODY).headers, BODY.replace(b"1999", b"19")), "signature_mismatch"),
        (signed(BODY, now=NOW - 301), "timestamp_out_of_tolerance"),
        (signed(BODY, now=NOW + 301), "timestamp_out_of_tolerance"),
        (signed(b'{"type":"invoice.created"}'), "malformed_payload"),
        (signed(b"not json"), "malformed_payload"),
    ],
    ids=[
        "no-signature",
        "no-timestamp",
        "not-base64",
        "bad-timestamp",
        "body-changed",
        "too-old",
        "too-new",
        "no-id",
        "not-json",
    ],
)
def test_failures(req: Request, reason: str) -> None:
    with pytest.raises(VerificationError) as exc:
        PROVIDER.verify(req, endpoint(), now=NOW)
    assert exc.value.reason == reason


def test_missing_prefix_is_malformed() -> None:
    options = {"header": "X-Sig", "prefix": "sha256="}
    _, headers = PROVIDER.sign(endpoint(**options), BODY, now=NOW)
    with pytest.raises(VerificationError) as exc:
        bare = Request({"x-sig": headers["X-Sig"].removeprefix("sha256=")}, BODY)
        PROVIDER.verify(bare, endpoint(**options), now=NOW)
    assert exc.value.reason == "malformed_signature"


@pytest.mark.parametrize(
    "options",
    [
        {"algorithm": "sha256"},
        {"header": "X-Sig", "algorithm": "md5"},
        {"header": "X-Sig", "encoding": "base32"},
        {"header": "X-Sig", "template": "{timestamp}"},
        {"header": "X-Sig", "template": "{id}.{body}"},
        {"header": "X-Sig", "template": "{timestamp}.{body}"},
        {"header": "X-Sig", "id_header": "X-Id", "id_path": "id"},
        {"header": "X-Sig", "secret_encoding": "hex"},
    ],
    ids=[
        "no-header",
        "algorithm",
        "encoding",
        "no-body",
        "unknown-placeholder",
        "timestamp-without-header",
        "two-id-sources",
        "unknown-option",
    ],
)
def test_validate_rejects_bad_options(options: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="'generic'"):
        PROVIDER.validate(endpoint(**options))


def test_signing_helper_matches_an_independent_hmac() -> None:
    """``signed`` comes from the provider under test, so check it against ``hmac`` itself: a bug
    shared by sign and verify (wrong template, algorithm or encoding) would otherwise pass."""
    import base64
    import hmac as std_hmac

    body = b'{"id":"evt_1","type":"invoice.paid"}'
    now = NOW + 7
    req = signed(body, now=now)
    assert req.header("X-Timestamp") == str(now)
    expected = std_hmac.new(b"s3cret", f"{now}.".encode() + body, hashlib.sha512).digest()
    assert req.header("X-Signature") == base64.b64encode(expected).decode()
    assert PROVIDER.verify(req, endpoint(), now=now).events[0].event_id == "evt_1"


def test_verifies_an_independently_computed_hex_signature() -> None:
    body = b'{"id":"evt_2"}'
    digest = hashlib.sha256
    import hmac as std_hmac

    signature = "sha256=" + std_hmac.new(b"k3y", body, digest).hexdigest()
    options = {"header": "X-Sig", "prefix": "sha256=", "id_path": "id"}
    req = Request({"x-sig": signature}, body)
    assert PROVIDER.verify(req, endpoint("k3y", **options), now=NOW).events[0].event_id == "evt_2"
    forged = Request({"x-sig": "sha256=" + std_hmac.new(b"other", body, digest).hexdigest()}, body)
    with pytest.raises(VerificationError):
        PROVIDER.verify(forged, endpoint("k3y", **options), now=NOW)
