"""Lemon Squeezy: vectors over the docs' example events, extract and amount, one test per failure rule, rotation.

Lemon Squeezy publishes the formula (hex HMAC-SHA256 of the raw body with the signing secret) and
example events, but no signature value and no Python SDK verifier:
https://docs.lemonsqueezy.com/help/webhooks/signing-requests and
https://docs.lemonsqueezy.com/help/webhooks/webhook-requests (``order_created``);
``subscription_updated`` follows https://docs.lemonsqueezy.com/guides/developer-guide/webhooks.
Each expected value was computed once with ``openssl dgst -sha256 -hmac ls-signing-secret``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from webhooks.errors import VerificationError
from webhooks.providers.base import Endpoint, Request, content_id
from webhooks.providers.lemonsqueezy import LemonSqueezy

PAYLOADS = Path(__file__).parents[1] / "payloads" / "lemonsqueezy"
PROVIDER = LemonSqueezy()
KEY = "ls-signing-secret"
NOW = 1_700_000_000
VECTORS = {  # file → openssl's hex HMAC-SHA256 of its bytes under KEY
    "order_created__basic.json": "961ba4759913ee4ce8cf7662e9ac54f181068ea67d92374960733e96472ae735",
    "subscription_updated__basic.json": "fd3511b83fb4ec09f8b65a697e1a3ce3db38550a736a799d7885fba6e9c1fe07",
}
BODY = (PAYLOADS / "order_created__basic.json").read_bytes()


def endpoint(*secrets: str) -> Endpoint:
    return Endpoint("ls", "lemonsqueezy", secrets or (KEY,))


def request(body: bytes, signature: str | None = None, **extra: str) -> Request:
    value = PROVIDER.sign(endpoint(), body, now=NOW)[1]["X-Signature"] if signature is None else signature
    return Request({"x-signature": value, **extra}, body)


@pytest.mark.parametrize(
    ("name", "event_type", "ref", "amount"),
    [
        ("order_created__basic.json", "order_created", ("order", "1", 1629193553000), (1199, "USD")),
        ("subscription_updated__basic.json", "subscription_updated", ("subscription", "1", 1674564242000), None),
    ],
)
def test_docs_vectors_extract_and_amount(
    name: str, event_type: str, ref: tuple[str, str, int], amount: tuple[int, str] | None
) -> None:
    body = (PAYLOADS / name).read_bytes()
    _, headers = PROVIDER.sign(endpoint(), body, now=NOW)
    assert (headers["X-Signature"], headers["X-Event-Name"]) == (VECTORS[name], event_type)
    result = PROVIDER.verify(request(body, VECTORS[name]), endpoint(), now=NOW)
    assert [(e.event_id, e.event_type, e.object_id) for e in result.events] == [(content_id(body), event_type, "1")]
    assert result.replay_key is None  # the id is the signed body's digest
    found = PROVIDER.extract(event_type, PROVIDER.event_data(body, None))
    assert found is not None and (found.type, found.id, found.version) == ref
    assert PROVIDER.amount(body, None) == amount


def test_the_unsigned_event_name_header_is_never_read() -> None:
    result = PROVIDER.verify(request(BODY, **{"x-event-name": "order_refunded"}), endpoint(), now=NOW)
    assert result.events[0].event_type == "order_created"


def test_rotation() -> None:
    for index, key in enumerate(("old-secret", "new-secret")):
        value = PROVIDER.sign(endpoint(key), BODY, now=NOW)[1]["X-Signature"]
        result = PROVIDER.verify(request(BODY, value), endpoint("old-secret", "new-secret"), now=NOW)
        assert result.events[0].secret_index == index


@pytest.mark.parametrize(
    ("req", "reason"),
    [
        (Request({}, BODY), "missing_signature"),
        (request(BODY, "sha256=" + VECTORS["order_created__basic.json"]), "malformed_signature"),
        (request(BODY, PROVIDER.sign(endpoint("wrong-secret"), BODY, now=NOW)[1]["X-Signature"]), "signature_mismatch"),
        (Request(request(BODY).headers, BODY.replace(b'"total": 1199', b'"total": 1')), "signature_mismatch"),
        (request(b"[]"), "malformed_payload"),
        (request(b'{"meta": {}, "data": {"type": "orders", "id": "1"}}'), "malformed_payload"),
    ],
    ids=["missing", "prefixed", "wrong-secret", "body-changed", "not-an-object", "no-event-name"],
)
def test_failures(req: Request, reason: str) -> None:
    with pytest.raises(VerificationError) as exc:
        PROVIDER.verify(req, endpoint(), now=NOW)
    assert exc.value.reason == reason
