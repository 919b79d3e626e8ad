"""Paystack: vectors over the docs' example events, extract and amount, one test per failure rule, rotation.

Paystack publishes the formula (hex HMAC-SHA512 of the body with the secret key) and example
events, but no signature value and no Python SDK verifier: https://paystack.com/docs/payments/webhooks/
The bodies are the docs' ``charge.success`` and ``transfer.success`` examples; each expected value
was computed once with ``openssl dgst -sha512 -hmac <KEY>``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from webhooks.errors import VerificationError
from webhooks.providers.base import Endpoint, Request, content_id
from webhooks.providers.paystack import Paystack, object_type

PAYLOADS = Path(__file__).parents[1] / "payloads" / "paystack"
PROVIDER = Paystack()
KEY = "sk_test_5f3ae2e7c0d4b1a9e8f7a6b5c4d3e2f1a0b9c8d7"
NOW = 1_700_000_000
VECTORS = {  # file → openssl's hex HMAC-SHA512 of its bytes under KEY
    "charge.success__card.json": "92fe07889f0dbd25a984aa462c8da1fcd73b9fd0163bf59173f8be771413aa4f"
    "b3e0081409de2fe2abb11290510a70e220e890605d45f211bd0b2c3d455f61a8",
    "transfer.success__basic.json": "b91081c6c7a1ef9fa1c129982275c291554d8a6a775f14a068c8f9c947d17546"
    "595a14b76d87daf907ba7b375b0c638e129a3c6ff233ea3c6ed78cdd491e03c4",
}
BODY = (PAYLOADS / "charge.success__card.json").read_bytes()


def endpoint(*secrets: str) -> Endpoint:
    return Endpoint("ps", "paystack", secrets or (KEY,))


def request(body: bytes, signature: str | None = None) -> Request:
    value = PROVIDER.sign(endpoint(), body, now=NOW)[1]["x-paystack-signature"] if signature is None else signature
    return Request({"x-paystack-signature": value}, body)


@pytest.mark.parametrize(
    ("name", "event_type", "ref", "amount", "reference"),
    [
        ("charge.success__card.json", "charge.success", ("transaction", "302961", 0), (10000, "NGN"), "qTPrJoy9Bx"),
        ("transfer.success__basic.json", "transfer.success", ("transfer", "37272792", 1603715337000),
         (30000, "NGN"), "1jhbs3ozmen0k7y5efmw"),
    ],
)  # fmt: skip
def test_docs_vectors_extract_and_amount(
    name: str, event_type: str, ref: tuple[str, str, int], amount: tuple[int, str], reference: str
) -> None:
    body = (PAYLOADS / name).read_bytes()
    assert PROVIDER.sign(endpoint(), body, now=NOW)[1]["x-paystack-signature"] == VECTORS[name]
    result = PROVIDER.verify(request(body, VECTORS[name]), endpoint(), now=NOW)
    (event,) = result.events
    assert (event.event_id, event.event_type, event.object_id, event.reference) == (
        content_id(body),
        event_type,
        ref[1],
        reference,
    )
    assert result.replay_key is None  # the id is the signed body's digest
    found = PROVIDER.extract(event_type, PROVIDER.event_data(body, None))
    assert found is not None and (found.type, found.id, found.version) == ref
    assert PROVIDER.amount(body, None) == amount


@pytest.mark.parametrize(
    ("event_type", "kind"),
    [
        ("charge.success", "transaction"),
        ("charge.dispute.create", "dispute"),
        ("refund.processed", "refund"),
        ("subscription.disable", "subscription"),
        ("invoice.payment_failed", "invoice"),
    ],
)
def test_object_type(event_type: str, kind: str) -> None:
    assert object_type(event_type) == kind


def test_rotation_and_one_id_per_body() -> None:
    for index, key in enumerate(("sk_live_old0", "sk_live_new0")):
        value = PROVIDER.sign(endpoint(key), BODY, now=NOW)[1]["x-paystack-signature"]
        result = PROVIDER.verify(request(BODY, value), endpoint("sk_live_old0", "sk_live_new0"), now=NOW)
        assert result.events[0].secret_index == index
        assert result.events[0].event_id == content_id(BODY)  # a retry (same body) is a duplicate


@pytest.mark.parametrize(
    ("req", "reason"),
    [
        (Request({}, BODY), "missing_signature"),
        (request(BODY, "zz" * 64), "malformed_signature"),
        (request(BODY, VECTORS["charge.success__card.json"][:-1]), "malformed_signature"),
        (request(BODY, PROVIDER.sign(endpoint("sk_test_wrong"), BODY, now=NOW)[1]["x-paystack-signature"]),
         "signature_mismatch"),
        (Request(request(BODY).headers, BODY.replace(b'"amount": 10000', b'"amount": 10')), "signature_mismatch"),
        (request(BODY, PROVIDER.sign(endpoint(), BODY, now=NOW)[1]["x-paystack-signature"][:64]),
         "signature_mismatch"),  # a SHA-256-length prefix never matches
        (request(b"event=charge.success"), "malformed_payload"),
        (request(b'{"data": {"id": 1}}'), "malformed_payload"),
    ],
    ids=["missing", "not-hex", "odd-length", "wrong-key", "body-changed", "truncated", "not-json", "no-event"],
)  # fmt: skip
def test_failures(req: Request, reason: str) -> None:
    with pytest.raises(VerificationError) as exc:
        PROVIDER.verify(req, endpoint(), now=NOW)
    assert exc.value.reason == reason
