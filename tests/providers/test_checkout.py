"""Checkout.com: vectors over the docs' example events, extract and amount, one test per failure rule, rotation.

Checkout.com publishes the formula (hex HMAC-SHA256 of the raw body with the webhook's signature
key) and example events, but no signature value and no Python SDK verifier:
https://www.checkout.com/docs/developer-resources/webhooks/manage-webhooks/set-up-your-webhook-receiver
The bodies are the docs' examples (https://www.checkout.com/docs/developer-resources/webhooks/webhook-event-types/payment_captured,
…/payment_paid); each expected value was computed once with ``openssl dgst -sha256 -hmac cko-signature-key``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from webhooks.errors import VerificationError
from webhooks.providers.base import Endpoint, Request
from webhooks.providers.checkout import Checkout

PAYLOADS = Path(__file__).parents[1] / "payloads" / "checkout"
PROVIDER = Checkout()
KEY = "cko-signature-key"
NOW = 1_700_000_000
VECTORS = {  # file → openssl's hex HMAC-SHA256 of its bytes under KEY
    "payment_captured__basic.json": "25faf5bf2879781f5fd667b27ede9ccf53bd1a1558ea164f77b489fcfffcb664",
    "payment_paid__payout.json": "7cfc8dba444fc3cd68466c0e0e65017f239c73f5cb92b92bcd0b1347a4df0468",
    "dispute_received__basic.json": "23fe6b578de601ec01d2ca278ba051b69a89b1dafc599e3e0eabd0f684d9b1cc",
}
BODY = (PAYLOADS / "payment_captured__basic.json").read_bytes()


def endpoint(*secrets: str) -> Endpoint:
    return Endpoint("cko", "checkout", secrets or (KEY,))


def request(body: bytes, signature: str | None = None) -> Request:
    value = PROVIDER.sign(endpoint(), body, now=NOW)[1]["Cko-Signature"] if signature is None else signature
    return Request({"cko-signature": value}, body)


@pytest.mark.parametrize(
    ("name", "event", "ref", "amount"),
    [
        ("payment_captured__basic.json", ("evt_fkfqht6yonme7bk7jawrgzbbxq", "payment_captured"),
         ("payment", "pay_vti5layihapu5bhbn5tjtk6eem", 1684919552357), (2000, "EUR")),
        ("payment_paid__payout.json", ("evt_hbnxegj3dqyu5fsd4p2b4bxvpa", "payment_paid"),
         ("payment", "pay_g2fmfh6hwj4eho5lm7jrxu4pne", 1731434200889), (10, "USD")),
        ("dispute_received__basic.json", ("evt_6i6sdcexpnqulbwvhm2ocafq5e", "dispute_received"),
         ("dispute", "dsp_rbhwd2qrg13uhrp2newf", 1709547697000), (1040, "GBP")),
    ],
)  # fmt: skip
def test_docs_vectors_extract_and_amount(
    name: str, event: tuple[str, str], ref: tuple[str, str, int], amount: tuple[int, str]
) -> None:
    body = (PAYLOADS / name).read_bytes()
    assert PROVIDER.sign(endpoint(), body, now=NOW)[1]["Cko-Signature"] == VECTORS[name]
    result = PROVIDER.verify(request(body, VECTORS[name]), endpoint(), now=NOW)
    assert [(e.event_id, e.event_type) for e in result.events] == [event]
    assert result.replay_key is None  # the id is signed: a replay is a duplicate
    found = PROVIDER.extract(event[1], PROVIDER.event_data(body, None))
    assert found is not None and (found.type, found.id, found.version) == ref
    assert PROVIDER.describe_version(ref[2]) is not None
    assert PROVIDER.amount(body, None) == amount
    assert PROVIDER.verify(request(body, VECTORS[name].upper()), endpoint(), now=NOW).events  # hex in any case


def test_rotation_and_any_age() -> None:
    for index, key in enumerate(("old", "new")):
        value = PROVIDER.sign(endpoint(key), BODY, now=NOW)[1]["Cko-Signature"]
        assert PROVIDER.verify(request(BODY, value), endpoint("old", "new"), now=NOW).events[0].secret_index == index
    # No timestamp is signed: a day-old delivery verifies (its signed id makes it a duplicate).
    assert PROVIDER.verify(request(BODY), endpoint(), now=NOW + 86400).events


@pytest.mark.parametrize(
    ("req", "reason"),
    [
        (Request({}, BODY), "missing_signature"),
        (request(BODY, "zz" * 32), "malformed_signature"),
        (request(BODY, "ab cd" * 8), "malformed_signature"),
        (request(BODY, PROVIDER.sign(endpoint("wrong-key"), BODY, now=NOW)[1]["Cko-Signature"]), "signature_mismatch"),
        (Request(request(BODY).headers, BODY.replace(b'"amount": 2000', b'"amount": 1')), "signature_mismatch"),
        (request(b"not json"), "malformed_payload"),
        (request(b'{"type": "payment_captured"}'), "malformed_payload"),
        (request(b'{"id": "evt_1"}'), "malformed_payload"),
    ],
    ids=["missing", "not-hex", "spaced-hex", "wrong-key", "body-changed", "not-json", "no-id", "no-type"],
)
def test_failures(req: Request, reason: str) -> None:
    with pytest.raises(VerificationError) as exc:
        PROVIDER.verify(req, endpoint(), now=NOW)
    assert exc.value.reason == reason
