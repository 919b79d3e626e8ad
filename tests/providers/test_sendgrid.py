"""SendGrid: the SG1 vector, EventWebhook oracle both ways, batches, failures, key rotation."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from sendgrid.helpers.eventwebhook import EventWebhook

from webhooks.errors import ConfigError, VerificationError
from webhooks.providers.base import Endpoint, Request
from webhooks.providers.sendgrid import SIGNATURE, TIMESTAMP, SendGrid

PAYLOADS = Path(__file__).parents[1] / "payloads" / "sendgrid"
PROVIDER = SendGrid()
SG1_KEY = (
    "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3GRqe62gw+2fNNRaINX"
    "vVpiglSI8eNEc6wEA3F+g=="
)
SG1_SIGNATURE = "MEUCIGHQVtGj+Y3LkG9fLcxf3qfI10QysgDWmMOVmxG0u6ZUAiEAyBiXDWzM+uOe5W0JuG+luQAbPIqHh89M15TluLtEZtM="
SG1_TS = "1600112502"
NOW = 1_700_000_000


def keypair() -> tuple[str, str]:
    """(base64 DER public key, base64 DER PKCS#8 private key), as SendGrid shows / as we keep for tests."""
    private = ec.generate_private_key(ec.SECP256R1())
    public = private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    pkcs8 = private.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return base64.b64encode(public).decode(), base64.b64encode(pkcs8).decode()


PUBLIC, PRIVATE = keypair()
OTHER_PUBLIC, OTHER_PRIVATE = keypair()


def endpoint(*secrets: str, **options: object) -> Endpoint:
    return Endpoint("sg", "sendgrid", secrets or (PUBLIC,), options=options)


def signed(body: bytes, *, private: str = PRIVATE, now: float = NOW, **extra: str) -> Request:
    """The one correct signing helper every negative case starts from."""
    _, headers = PROVIDER.sign(endpoint(signing_key=private), body, now=now)
    return Request({k.lower(): v for k, v in {**headers, **extra}.items() if v}, body)


def test_official_vector_sg1() -> None:
    body = (PAYLOADS / "dropped__sg1.json").read_bytes()
    assert body.endswith(b"}]\r\n")
    req = Request({SIGNATURE.lower(): SG1_SIGNATURE, TIMESTAMP.lower(): SG1_TS}, body)
    result = PROVIDER.verify(req, endpoint(SG1_KEY), now=NOW)
    assert [(e.event_id, e.event_type, e.index, e.secret_index) for e in result.events] == [
        ("ZHJvcC0xMDk5NDkxOS1MUnpYbF9OSFN0T0doUTRrb2ZTbV9BLTA", "dropped", 0, 0)
    ]
    with pytest.raises(VerificationError) as exc:  # the trailing \r\n is signed
        PROVIDER.verify(Request(req.headers, body.rstrip()), endpoint(SG1_KEY), now=NOW)
    assert exc.value.reason == "signature_mismatch"


def test_batch_one_event_per_element() -> None:
    body = (PAYLOADS / "batch__delivery_engagement.json").read_bytes()
    result = PROVIDER.verify(signed(body), endpoint(), now=NOW)
    assert [(e.event_type, e.index) for e in result.events] == [("processed", 0), ("delivered", 1), ("open", 2)]
    data = PROVIDER.event_data(body, 2)
    assert data["sg_event_id"] == result.events[2].event_id
    ref = PROVIDER.extract("open", data)
    assert ref is not None and (ref.type, ref.version) == ("message", 1513299612000)


@pytest.mark.parametrize("name", ["dropped__sg1.json", "batch__delivery_engagement.json"])
def test_cryptography_signs_we_verify_and_sdk_verifies_ours(name: str) -> None:
    body = (PAYLOADS / name).read_bytes()
    private = serialization.load_der_private_key(base64.b64decode(PRIVATE), None)
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    independent = base64.b64encode(private.sign(b"1700000000" + body, ec.ECDSA(hashes.SHA256()))).decode()
    req = Request({SIGNATURE.lower(): independent, TIMESTAMP.lower(): "1700000000"}, body)
    PROVIDER.verify(req, endpoint(), now=NOW)
    sdk = EventWebhook()
    key = sdk.convert_public_key_to_ecdsa(PUBLIC)
    for signature in (independent, signed(body).header(SIGNATURE)):
        assert sdk.verify_signature(body.decode(), signature, "1700000000", key)


def test_rotation() -> None:
    body = (PAYLOADS / "batch__delivery_engagement.json").read_bytes()
    for index, private in enumerate((PRIVATE, OTHER_PRIVATE)):
        events = PROVIDER.verify(signed(body, private=private), endpoint(PUBLIC, OTHER_PUBLIC), now=NOW).events
        assert {e.secret_index for e in events} == {index}


def test_timestamp_checked_only_when_asked() -> None:
    req = signed((PAYLOADS / "dropped__sg1.json").read_bytes(), now=NOW - 3600)
    assert PROVIDER.verify(req, endpoint(), now=NOW).events[0].signed_at == NOW - 3600
    with pytest.raises(VerificationError) as exc:
        PROVIDER.verify(req, endpoint(check_timestamp=True), now=NOW)
    assert exc.value.reason == "timestamp_out_of_tolerance"


BODY = (PAYLOADS / "batch__delivery_engagement.json").read_bytes()


@pytest.mark.parametrize(
    ("req", "reason"),
    [
        (signed(BODY, **{SIGNATURE: ""}), "missing_signature"),
        (signed(BODY, **{TIMESTAMP: ""}), "missing_signature"),
        (signed(BODY, **{SIGNATURE: "%%%"}), "malformed_signature"),
        (Request(signed(BODY).headers, BODY.replace(b"open", b"click")), "signature_mismatch"),
        (signed(BODY, **{TIMESTAMP: str(NOW + 1)}), "signature_mismatch"),
        (signed(BODY, private=OTHER_PRIVATE), "signature_mismatch"),
        (signed(b'{"event":"open"}'), "malformed_payload"),
        (signed(b'[{"event":"open"}]'), "malformed_payload"),
    ],
    ids=[
        "no-signature",
        "no-timestamp",
        "not-base64",
        "body-changed",
        "timestamp-changed",
        "other-key",
        "not-array",
        "no-sg-event-id",
    ],
)
def test_failures(req: Request, reason: str) -> None:
    with pytest.raises(VerificationError) as exc:
        PROVIDER.verify(req, endpoint(), now=NOW)
    assert exc.value.reason == reason


def test_sign_needs_a_private_key() -> None:
    with pytest.raises(NotImplementedError, match="signing_key"):
        PROVIDER.sign(endpoint(), BODY, now=NOW)


def test_validate_rejects_a_bad_key() -> None:
    with pytest.raises(ConfigError, match="'sg'"):
        PROVIDER.validate(endpoint("bm90IGEga2V5"))
