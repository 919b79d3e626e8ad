"""Standard Webhooks / Svix: official vectors, SDK oracles, one test per failure rule, rotation."""

from __future__ import annotations

import base64
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import standardwebhooks
import svix
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from webhooks.errors import ConfigError, PayloadError, VerificationError
from webhooks.providers.base import Endpoint, Request
from webhooks.providers.standard import Standard

PAYLOADS = Path(__file__).parents[1] / "payloads" / "standard"
PROVIDER = Standard()
SW1_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SW1_ID, SW1_TS, SW1_BODY = "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", b'{"test": 2432232314}'
SW4_SEED = bytes(range(32))
SW4_PUBLIC = "whpk_A6EHv/POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg="
NOW = 1_700_000_000


def endpoint(*secrets: str, tolerance: int = 300) -> Endpoint:
    return Endpoint("std", "standard", secrets or (SW1_SECRET,), tolerance_seconds=tolerance)


def request(headers: dict[str, str], body: bytes) -> Request:
    return Request({k.lower(): v for k, v in headers.items()}, body)


def signed(body: bytes, *, secret: str = SW1_SECRET, now: float = NOW) -> Request:
    """The one correct signing helper every negative case starts from."""
    _, headers = PROVIDER.sign(endpoint(secret), body, now=now)
    return request(headers, body)


def vector(id_: str, ts: str, body: bytes, signature: str, prefix: str = "webhook") -> Request:
    return request({f"{prefix}-id": id_, f"{prefix}-timestamp": ts, f"{prefix}-signature": signature}, body)


@pytest.mark.parametrize(
    ("secret", "id_", "ts", "body", "signature", "prefix"),
    [
        (SW1_SECRET, SW1_ID, SW1_TS, SW1_BODY, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", "webhook"),
        (
            "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
            "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
            "1649367553",
            b'{"email":"test@example.com","username":"test_user"}',
            "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=",
            "webhook",
        ),
        (
            "whsec_plJ3nmyCDGBKInavdOK15jsl",
            "msg_loFOjxBNrRLzqYUf",
            "1731705121",
            (PAYLOADS / "ping__svix.json").read_bytes(),
            "v1,rAvfW3dJ/X/qxhsaXPOyyCGmRKsaKWcsNccKXlIktD0=",
            "svix",
        ),
    ],
    ids=["SW1", "SW2", "SW3-svix"],
)
def test_official_v1_vectors(secret: str, id_: str, ts: str, body: bytes, signature: str, prefix: str) -> None:
    result = PROVIDER.verify(vector(id_, ts, body, signature, prefix), endpoint(secret), now=int(ts))
    assert [(e.event_id, e.secret_index, e.signed_at) for e in result.events] == [(id_, 0, int(ts))]
    assert result.scheme == ("svix-v1" if prefix == "svix" else "standard-v1")


def test_sw1_body_file_is_byte_exact() -> None:
    assert (PAYLOADS / "unknown__sw1_vector.json").read_bytes() == SW1_BODY


def test_v1a_vector_sw4() -> None:
    sig = "v1a,yoUrgEkc12aGqm0n4Sydmdz55xJfTz4AsAgieHFjmkR7LJtqVCZOQYzvvHjI5kAey+r4iaBGxTFRrl2iBQxtDQ=="
    public = Ed25519PrivateKey.from_private_bytes(SW4_SEED).public_key().public_bytes_raw()
    assert "whpk_" + base64.b64encode(public).decode() == SW4_PUBLIC
    result = PROVIDER.verify(vector(SW1_ID, SW1_TS, SW1_BODY, sig), endpoint(SW4_PUBLIC), now=int(SW1_TS))
    assert (result.scheme, result.events[0].secret_index) == ("standard-v1a", 0)


def test_mixed_secrets_and_lists_skip_junk_entries() -> None:
    sig = "v1a,yoUrgEkc12aGqm0n4Sydmdz55xJfTz4AsAgieHFjmkR7LJtqVCZOQYzvvHjI5kAey+r4iaBGxTFRrl2iBQxtDQ=="
    header = f"junk v2,abc v1,not*base64 v1,{base64.b64encode(b'x' * 32).decode()} {sig}"
    result = PROVIDER.verify(
        vector(SW1_ID, SW1_TS, SW1_BODY, header), endpoint(SW1_SECRET, SW4_PUBLIC), now=int(SW1_TS)
    )
    assert (result.scheme, result.events[0].secret_index) == ("standard-v1a", 1)


@pytest.mark.parametrize("name", sorted(p.name for p in PAYLOADS.glob("*.json")))
def test_payload_files_round_trip(name: str) -> None:
    body = (PAYLOADS / name).read_bytes()
    event = PROVIDER.verify(signed(body), endpoint(), now=NOW).events[0]
    assert event.event_type == name.split("__")[0]


@pytest.mark.parametrize("sdk", [standardwebhooks.Webhook, svix.Webhook])
def test_sdk_signs_we_verify(sdk: type) -> None:
    body = (PAYLOADS / "user.created__spec_example.json").read_bytes()
    now = time.time()
    signature = sdk(SW1_SECRET).sign("msg_oracle", datetime.fromtimestamp(now, UTC), body.decode())
    result = PROVIDER.verify(vector("msg_oracle", str(int(now)), body, signature), endpoint(), now=now)
    assert result.events[0].event_type == "user.created"


@pytest.mark.parametrize("sdk", [standardwebhooks.Webhook, svix.Webhook])
def test_we_sign_sdk_verifies(sdk: type) -> None:
    body = (PAYLOADS / "invoice.paid__pretty.json").read_bytes()
    _, headers = PROVIDER.sign(endpoint(), body, now=time.time())
    if sdk is svix.Webhook:
        headers = {k.replace("webhook-", "svix-"): v for k, v in headers.items()}
    sdk(SW1_SECRET).verify(body, headers)  # raises unless valid (svix returns None, standardwebhooks the JSON)


def test_rotation_each_secret_accepted_and_recorded() -> None:
    old, new = "whsec_" + base64.b64encode(b"o" * 24).decode(), "whsec_" + base64.b64encode(b"n" * 24).decode()
    for index, secret in enumerate((old, new)):
        event = PROVIDER.verify(signed(SW1_BODY, secret=secret), endpoint(old, new), now=NOW).events[0]
        assert event.secret_index == index


def _replace(req: Request, **headers: str) -> Request:
    return Request({**req.headers, **headers}, req.body)


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (
            lambda r: Request({k: v for k, v in r.headers.items() if k != "webhook-signature"}, r.body),
            "missing_signature",
        ),
        (lambda r: Request({k: v for k, v in r.headers.items() if k != "webhook-id"}, r.body), "missing_signature"),
        (lambda r: _replace(r, **{"webhook-signature": "v1 v2,abc nocomma"}), "malformed_signature"),
        (lambda r: Request(r.headers, r.body + b" "), "signature_mismatch"),
        (lambda r: _replace(r, **{"webhook-id": "msg_other"}), "signature_mismatch"),
        (lambda r: _replace(r, **{"webhook-timestamp": str(NOW + 1)}), "signature_mismatch"),
    ],
    ids=["no-signature", "no-id", "only-junk", "body-changed", "id-changed", "timestamp-changed"],
)
def test_failures(mutate: object, reason: str) -> None:
    with pytest.raises(VerificationError) as exc:
        PROVIDER.verify(mutate(signed(SW1_BODY)), endpoint(), now=NOW)  # type: ignore[operator]
    assert exc.value.reason == reason


@pytest.mark.parametrize("skew", [-301, 301])
def test_timestamp_out_of_tolerance_both_ways(skew: int) -> None:
    with pytest.raises(VerificationError) as exc:
        PROVIDER.verify(signed(SW1_BODY, now=NOW + skew), endpoint(), now=NOW)
    assert exc.value.reason == "timestamp_out_of_tolerance"


def test_signed_but_not_json_is_malformed_payload() -> None:
    with pytest.raises(PayloadError) as exc:
        PROVIDER.verify(signed(b"not json"), endpoint(), now=NOW)
    assert exc.value.reason == "malformed_payload"


def test_public_key_only_endpoint_rejects_v1() -> None:
    with pytest.raises(VerificationError) as exc:
        PROVIDER.verify(signed(SW1_BODY), endpoint(SW4_PUBLIC), now=NOW)
    assert exc.value.reason == "signature_mismatch"


def test_cannot_sign_with_a_public_key() -> None:
    with pytest.raises(NotImplementedError, match="whpk_"):
        PROVIDER.sign(endpoint(SW4_PUBLIC), SW1_BODY, now=NOW)


@pytest.mark.parametrize("secrets", [(), ("whsec_***",), ("whpk_" + base64.b64encode(b"short").decode(),)])
def test_validate_rejects_bad_secrets(secrets: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError, match="'std'"):
        PROVIDER.validate(Endpoint("std", "standard", secrets))
