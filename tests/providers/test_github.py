"""GitHub: the official vector, payload files, one test per failure rule, rotation."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlencode

import pytest

from webhooks.errors import VerificationError
from webhooks.providers.base import Endpoint, Request
from webhooks.providers.github import GitHub

PAYLOADS = Path(__file__).parents[1] / "payloads" / "github"
PROVIDER = GitHub()
SECRET = "It's a Secret to Everybody"
NOW = 1_700_000_000


def endpoint(*secrets: str) -> Endpoint:
    return Endpoint("gh", "github", secrets or (SECRET,))


def signed(body: bytes, *, secret: str = SECRET, **extra: str) -> Request:
    """The one correct signing helper every negative case starts from."""
    _, headers = PROVIDER.sign(endpoint(secret), body, now=NOW)
    return Request({k.lower(): v for k, v in {**headers, **extra}.items()}, body)


def without(req: Request, name: str) -> Request:
    return Request({k: v for k, v in req.headers.items() if k != name.lower()}, req.body)


def test_official_vector_g1() -> None:
    _, headers = PROVIDER.sign(endpoint(), b"Hello, World!", now=NOW)
    assert headers["X-Hub-Signature-256"] == "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    # The signature holds; only the (non-JSON) body then fails, and with a payload error.
    with pytest.raises(VerificationError) as exc:
        PROVIDER.verify(signed(b"Hello, World!"), endpoint(), now=NOW)
    assert exc.value.reason == "malformed_payload"


@pytest.mark.parametrize(
    ("name", "event", "event_type"),
    [
        ("ping__repository.json", "ping", "ping"),
        ("issues__opened.json", "issues", "issues.opened"),
        ("push__main.json", "push", "push"),
    ],
)
def test_payload_files(name: str, event: str, event_type: str) -> None:
    body = (PAYLOADS / name).read_bytes()
    req = signed(body, **{"X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958"})
    assert req.header("X-GitHub-Event") == event
    result = PROVIDER.verify(req, endpoint(), now=NOW)
    assert [(e.event_id, e.event_type, e.secret_index) for e in result.events] == [
        ("72d3162e-cc78-11e3-81ab-4c9367dc0958", event_type, 0)
    ]
    assert PROVIDER.event_data(body, None)["sender"]["login"] == "octocat"


def test_extract_issue() -> None:
    data = PROVIDER.event_data((PAYLOADS / "issues__opened.json").read_bytes(), None)
    ref = PROVIDER.extract("issues.opened", data)
    assert ref is not None and (ref.type, ref.id, ref.version) == ("issue", "1858261013", 1710230504000)
    assert PROVIDER.extract("push", PROVIDER.event_data((PAYLOADS / "push__main.json").read_bytes(), None)) is None


def test_form_encoded_delivery() -> None:
    body = urlencode({"payload": (PAYLOADS / "issues__opened.json").read_text()}).encode()
    result = PROVIDER.verify(signed(body, **{"X-GitHub-Event": "issues"}), endpoint(), now=NOW)
    assert result.events[0].event_type == "issues.opened"
    assert PROVIDER.event_data(body, None)["issue"]["number"] == 1347


def test_rotation() -> None:
    body = (PAYLOADS / "ping__repository.json").read_bytes()
    for index, secret in enumerate(("old-secret", "new-secret")):
        event = PROVIDER.verify(signed(body, secret=secret), endpoint("old-secret", "new-secret"), now=NOW).events[0]
        assert event.secret_index == index


BODY = (PAYLOADS / "ping__repository.json").read_bytes()


@pytest.mark.parametrize(
    ("req", "reason"),
    [
        (without(signed(BODY), "X-Hub-Signature-256"), "missing_signature"),
        (signed(BODY, **{"X-Hub-Signature-256": "sha1=" + "0" * 40}), "malformed_signature"),
        (signed(BODY, **{"X-Hub-Signature-256": "sha256=zz"}), "malformed_signature"),
        (Request(signed(BODY).headers, BODY + b"\n"), "signature_mismatch"),
        (without(signed(BODY), "X-GitHub-Delivery"), "malformed_payload"),
        (without(signed(BODY), "X-GitHub-Event"), "malformed_payload"),
    ],
    ids=["missing", "sha1-prefix", "not-hex", "body-changed", "no-delivery", "no-event"],
)
def test_failures(req: Request, reason: str) -> None:
    with pytest.raises(VerificationError) as exc:
        PROVIDER.verify(req, endpoint(), now=NOW)
    assert exc.value.reason == reason
