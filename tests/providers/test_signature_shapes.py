"""Every kind: empty, truncated and wrong-length signatures never verify — alone, next to a valid
signature made with a secret that is not configured, or with mixed secret types; empty keys are
refused at start-up; one signature never yields two events (replay keys). Every request here
derives from the kind's one correct signer (``tests.providers.test_fuzz.signed``)."""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import replace
from urllib.parse import parse_qs, urlencode

import pytest
import stripe
from hypothesis import given, settings
from hypothesis import strategies as st
from standardwebhooks.webhooks import Webhook

from tests.support.signing import ENDPOINTS, NOW, signed
from tests.support.signing import provider as provider_of
from webhooks.errors import ConfigError, UnavailableError, VerificationError
from webhooks.providers import PROVIDERS
from webhooks.providers.base import Endpoint, Request, first_match, hmac_digest, replay_key
from webhooks.providers.plaid_jose import b64url

KINDS = sorted(PROVIDERS)
# Kinds whose signature sits inside the body, not in a header: their shapes are tested in their own file.
IN_BODY = {"mailgun": "tests/providers/test_mailgun.py::test_signature_shapes_never_verify"}
HEADER_KINDS = [k for k in KINDS if k not in IN_BODY]
BODY = b'{"id": "evt_1", "type": "t.created", "event_type": "T", "data": {"id": 1}, "created": 1700000000}'
PUBLIC_KEY = "whpk_A6EHv/POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg="  # SW4
SW1_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SHAPES = settings(max_examples=40, deadline=None)
BODIES = {
    "sendgrid": b'[{"sg_event_id": "sg_1", "event": "delivered", "sg_message_id": "m1", "timestamp": 1}]',
    "paystack": b'{"event": "charge.success", "data": {"id": 1, "reference": "r1"}}',
    "lemonsqueezy": b'{"meta": {"event_name": "order_created"}, "data": {"type": "orders", "id": "1"}}',
    "razorpay": b'{"entity": "event", "event": "payment.captured", "contains": ["payment"], '
    b'"payload": {"payment": {"entity": {"id": "pay_1", "amount": 100, "currency": "INR"}}}, "created_at": 1700000000}',
    "paddle": b'{"event_id": "evt_1", "event_type": "transaction.completed", "occurred_at": "2023-11-14T22:13:20Z", '
    b'"notification_id": "ntf_1", "data": {"id": "txn_1"}}',
    "gocardless": b'{"events": [{"id": "EV1", "created_at": "2023-11-14T22:13:20.000Z", "resource_type": "payments", '
    b'"action": "confirmed", "links": {"payment": "PM1"}}]}',
    "square": b'{"event_id": "evt_1", "type": "t.created", "data": {"type": "t", "id": "1"}}',
    "zoom": b'{"event": "meeting.started", "event_ts": 1700000000000, "payload": {"object": {"id": "1"}}}',
    "mailgun": b'{"event-data": {"id": "evt_1", "event": "delivered", "timestamp": 1700000000.5}}',
    "braintree": b'<notification><timestamp type="datetime">x</timestamp><kind>transaction_settled</kind>'
    b"<subject><transaction><id>t1</id></transaction></subject></notification>",
    "plaid": b'{"webhook_type": "TRANSACTIONS", "webhook_code": "SYNC_UPDATES_AVAILABLE", "item_id": "it_1"}',
    "mollie": b'{"resource": "event", "id": "event_1", "type": "payment-link.paid", "entityId": "pl_1", '
    b'"createdAt": "2023-11-14T22:13:20.0Z"}',
    "mercadopago": b'{"action": "payment.updated", "data": {"id": "123456"}, "id": 1, "type": "payment"}',
}
BODY_FIELDS = {"braintree"}  # kinds whose signature is a field of the (form) body, named by its codec


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _hex_after(prefix: str) -> Callable[[str], bytes]:
    return lambda value: bytes.fromhex(value.rsplit(prefix, 1)[1])


# kind -> (signature header, value -> signature bytes, (genuine value, signatures) -> header value)
Codec = tuple[str, Callable[[str], bytes], Callable[[str, list[bytes]], str]]
CODECS: dict[str, Codec] = {
    "stripe": (
        "stripe-signature",
        _hex_after("v1="),
        lambda v, sigs: ",".join([v.split(",")[0], *(f"v1={s.hex()}" for s in sigs)]),
    ),
    "standard": (
        "webhook-signature",
        lambda v: base64.b64decode(v.split(",", 1)[1]),
        lambda v, sigs: " ".join(f"v1,{b64(s)}" for s in sigs),
    ),
    "github": (
        "x-hub-signature-256",
        _hex_after("sha256="),
        lambda v, sigs: ", ".join(f"sha256={s.hex()}" for s in sigs),
    ),
    "slack": ("x-slack-signature", _hex_after("v0="), lambda v, sigs: ", ".join(f"v0={s.hex()}" for s in sigs)),
    "hmac": ("x-signature", _hex_after("sha256="), lambda v, sigs: ", ".join(f"sha256={s.hex()}" for s in sigs)),
    "mollie": (
        "x-mollie-signature",
        _hex_after("sha256="),
        lambda v, sigs: ", ".join(f"sha256={s.hex()}" for s in sigs),
    ),
    "mercadopago": (
        "x-signature",
        _hex_after("v1="),
        lambda v, sigs: ",".join([v.split(",")[0], *(f"v1={s.hex()}" for s in sigs)]),
    ),
    "paddle": (
        "paddle-signature",
        _hex_after("h1="),
        lambda v, sigs: ";".join([v.split(";")[0], *(f"h1={s.hex()}" for s in sigs)]),
    ),
    "plaid": (
        "plaid-verification",
        lambda v: base64.urlsafe_b64decode(v.rsplit(".", 1)[1] + "=" * (-len(v.rsplit(".", 1)[1]) % 4)),
        lambda v, sigs: ", ".join(f"{v.rsplit('.', 1)[0]}.{b64url(s)}" for s in sigs),
    ),
    **{
        kind: (header, bytes.fromhex, lambda v, sigs: ", ".join(s.hex() for s in sigs))
        for kind, header in (("razorpay", "x-razorpay-signature"), ("gocardless", "webhook-signature"))
    },
    "braintree": (
        "bt_signature",
        lambda v: bytes.fromhex(v.split("|")[1]),
        lambda v, sigs: "&".join(f"{v.split('|')[0]}|{s.hex()}" for s in sigs),
    ),
    **{
        kind: (header, bytes.fromhex, lambda v, sigs: ", ".join(s.hex() for s in sigs))
        for kind, header in (
            ("checkout", "cko-signature"),
            ("paystack", "x-paystack-signature"),
            ("lemonsqueezy", "x-signature"),
        )
    },
    "zoom": ("x-zm-signature", _hex_after("v0="), lambda v, sigs: ", ".join(f"v0={s.hex()}" for s in sigs)),
    **{
        kind: (header, base64.b64decode, lambda v, sigs: ", ".join(b64(s) for s in sigs))
        for kind, header in (
            ("shopify", "x-shopify-hmac-sha256"),
            ("twilio", "x-twilio-signature"),
            ("adyen", "hmacsignature"),
            ("sendgrid", "x-twilio-email-event-webhook-signature"),
            ("paypal", "paypal-transmission-sig"),
            ("square", "x-square-hmacsha256-signature"),
            ("sns", "Signature"),  # a field of the JSON body: JSON_FIELDS
        )
    },
}
JSON_FIELDS = {"sns"}  # kinds whose signature is a field of the JSON body, named by its codec


def test_every_kind_has_its_signature_shapes_tested() -> None:
    assert set(CODECS) | set(IN_BODY) == set(KINDS) and not set(CODECS) & set(IN_BODY)


def foreign_endpoint(kind: str) -> Endpoint:
    """The kind's endpoint with a key that is not configured (same shape as the real one)."""
    endpoint = ENDPOINTS[kind]
    other = {
        "stripe": ("whsec_other",),
        "standard": ("whsec_" + b64(b"o" * 24),),
        "adyen": ("AB" * 32,),
        "github": ("other",),
        "shopify": ("other",),
        "slack": ("other",),
        "twilio": ("other",),
        "hmac": ("other",),
        "checkout": ("other-cko-key",),
        "paystack": ("sk_test_" + "0" * 40,),
        "lemonsqueezy": ("other-ls-secret",),
        "razorpay": ("other",),
        "paddle": ("pdl_other",),
        "gocardless": ("other",),
        "square": ("other",),
        "zoom": ("other",),
        "braintree": ("bt_fuzz_public:another-private-key",),
        "mollie": ("other",),
        "mercadopago": ("other",),
    }
    return replace(endpoint, secrets=other.get(kind, endpoint.secrets))


@functools.cache
def genuine(kind: str) -> Request:
    """One genuine request per kind (cached: ECDSA signatures are randomized)."""
    return signed(kind, BODIES.get(kind, BODY))


def foreign(kind: str) -> bytes:
    """A signature over the same request that a key which is not configured would make."""
    parse = CODECS[kind][1]
    if kind == "sendgrid":
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        request = genuine(kind)
        stamp = request.header("X-Twilio-Email-Event-Webhook-Timestamp") or ""
        return ec.generate_private_key(ec.SECP256R1()).sign(stamp.encode() + request.body, ec.ECDSA(hashes.SHA256()))
    if kind == "paypal":
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding, rsa

        from webhooks.providers.paypal import signed_string

        request = genuine(kind)
        message = signed_string(
            request.header("paypal-transmission-id") or "",
            request.header("paypal-transmission-time") or "",
            "WH-FUZZ",
            BODY,
        )
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        return key.sign(message, padding.PKCS1v15(), hashes.SHA256())
    if kind == "sns":
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding, rsa

        from webhooks.providers.sns import signed_string

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        return key.sign(signed_string(json.loads(genuine(kind).body)), padding.PKCS1v15(), hashes.SHA256())
    if kind == "plaid":  # another P-256 key under the configured kid
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        other = ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        endpoint = replace(ENDPOINTS[kind], options={**ENDPOINTS[kind].options, "signing_key": other.decode()})
        _, headers = provider_of(kind).sign(endpoint, BODIES[kind], now=NOW)
        return parse(headers["Plaid-Verification"])
    p, endpoint = provider_of(kind), foreign_endpoint(kind)
    request = genuine(kind)
    if kind == "adyen":
        return hmac_digest(bytes.fromhex(endpoint.secrets[0]), BODY)
    url = request.url
    body, headers = p.sign(endpoint, BODIES.get(kind, BODY), now=NOW, url=url)
    return parse(signature_value(kind, Request({k.lower(): v for k, v in headers.items()}, body)))


def signature_value(kind: str, request: Request) -> str:
    """The signature as the request carries it: its header, or its body's field (``BODY_FIELDS``:
    of a form, ``JSON_FIELDS``: of a JSON object)."""
    name = CODECS[kind][0]
    if kind in BODY_FIELDS:
        return parse_qs(request.body.decode())[name][0]
    if kind in JSON_FIELDS:
        return str(json.loads(request.body)[name])
    return request.headers[name]


def with_signatures(kind: str, signatures: list[bytes]) -> Request:
    request = genuine(kind)
    header, _, render = CODECS[kind]
    value = render(signature_value(kind, request), signatures)
    if kind in BODY_FIELDS:
        form = {k: v[0] for k, v in parse_qs(request.body.decode()).items()} | {header: value}
        return Request(request.headers, urlencode(form).encode(), request.url)
    if kind in JSON_FIELDS:
        body = json.dumps({**json.loads(request.body), header: value}).encode()
        return Request(dict(request.headers), body, request.url)
    return Request({**request.headers, header: value}, request.body, request.url)


def refused(kind: str, request: Request, endpoint: Endpoint | None = None) -> bool:
    try:
        provider_of(kind).verify(request, endpoint or ENDPOINTS[kind], now=NOW)
    except (VerificationError, UnavailableError):
        return True
    return False


def mangled(signature: bytes) -> list[bytes]:
    """Empty, truncated and wrong-length variants of a signature (the genuine one included)."""
    return [
        b"",
        signature[:1],
        signature[: len(signature) // 2],
        signature[:-1],
        signature + b"\x00",
        signature + signature,
        b"\x00" * len(signature[:-1]),
        signature[1:],
    ]


@pytest.mark.parametrize("kind", HEADER_KINDS)
def test_genuine_and_foreign_signatures_are_what_they_claim(kind: str) -> None:
    """The oracles of this file: the genuine request verifies, the foreign signature does not."""
    parse = CODECS[kind][1]
    request = genuine(kind)
    provider_of(kind).verify(request, ENDPOINTS[kind], now=NOW)
    assert refused(kind, with_signatures(kind, [foreign(kind)]))
    again = with_signatures(kind, [parse(signature_value(kind, request))])
    # Rendered as a list for stripe and standard: still the same signature, which verifies.
    assert signature_value(kind, again) == signature_value(kind, request) or kind in ("stripe", "standard")
    provider_of(kind).verify(again, ENDPOINTS[kind], now=NOW)


@pytest.mark.parametrize("kind", HEADER_KINDS)
def test_empty_truncated_and_wrong_length_never_verify(kind: str) -> None:
    parse = CODECS[kind][1]
    _, parse, _ = CODECS[kind]
    real, other = parse(signature_value(kind, genuine(kind))), foreign(kind)
    for bad in mangled(real):
        assert refused(kind, with_signatures(kind, [bad])), f"{kind}: {len(bad)}-byte signature verified"
        assert refused(kind, with_signatures(kind, [bad, other])), f"{kind}: next to a foreign one"
        assert refused(kind, with_signatures(kind, [other, bad])), f"{kind}: after a foreign one"


@pytest.mark.parametrize("kind", HEADER_KINDS)
@SHAPES
@given(data=st.data())
def test_no_prefix_or_extension_of_the_genuine_signature_verifies(kind: str, data: st.DataObject) -> None:
    parse = CODECS[kind][1]
    real = parse(signature_value(kind, genuine(kind)))
    cut = data.draw(st.integers(0, len(real) - 1))
    extra = data.draw(st.binary(min_size=1, max_size=8))
    noise = data.draw(st.binary(max_size=80).filter(lambda b: len(b) != len(real)))
    for bad in (real[:cut], real + extra, noise, extra + real[:cut]):
        assert refused(kind, with_signatures(kind, [bad])), f"{kind}: {len(bad)} bytes verified"


# -- Standard Webhooks: the critical bypass, with mixed whsec_/whpk_ secrets ----------------------

MIXED = Endpoint("standard", "standard", (PUBLIC_KEY, SW1_SECRET))


def standard_request(signature: str, prefix: str = "webhook") -> Request:
    return Request(
        {
            f"{prefix}-id": "msg_p5jXN8AQM9LWM0D4loKWxJek",
            f"{prefix}-timestamp": str(NOW),
            f"{prefix}-signature": signature,
        },
        b'{"test": 2432232314}',
    )


@pytest.mark.parametrize("prefix", ["webhook", "svix"])
@pytest.mark.parametrize(
    "signature",
    [
        "v1,",
        "v1, v1a,",
        "v1a,",
        "v1,= v1a,=",
        "v1,AA==",
        "v1a,AA==",
        "v1," + b64(b"\x00" * 31),
        "v1," + b64(b"\x00" * 33),
        "v1a," + b64(b"\x00" * 32),
    ],
)
@pytest.mark.parametrize("order", [(PUBLIC_KEY, SW1_SECRET), (SW1_SECRET, PUBLIC_KEY), (PUBLIC_KEY,)])
def test_standard_empty_or_short_signature_with_mixed_secrets(
    prefix: str, signature: str, order: tuple[str, ...]
) -> None:
    """On main ``v1,`` verified: ``_mac`` gave b"" for the public key and b"" == b""."""
    endpoint = Endpoint("standard", "standard", order)
    with pytest.raises(VerificationError) as exc:
        PROVIDERS["standard"].verify(standard_request(signature, prefix), endpoint, now=NOW)
    assert exc.value.reason in ("malformed_signature", "signature_mismatch")


def test_standard_mixed_secrets_keep_their_indexes() -> None:
    """SDK oracle: standardwebhooks signs; the matching secret's position in ``secrets`` is reported."""
    from datetime import UTC, datetime

    now = int(time.time())  # the SDK's verify reads the clock
    signature = Webhook(SW1_SECRET).sign("msg_1", datetime.fromtimestamp(now, UTC), '{"type": "a"}')
    request = Request(
        {
            "webhook-id": "msg_1",
            "webhook-timestamp": str(now),
            "webhook-signature": f"v1, v1a, {signature} v1a,{b64(bytes(64))}",
        },
        b'{"type": "a"}',
    )
    for endpoint, index in ((MIXED, 1), (Endpoint("s", "standard", (SW1_SECRET, PUBLIC_KEY)), 0)):
        event = PROVIDERS["standard"].verify(request, endpoint, now=now).events[0]
        assert event.secret_index == index
        Webhook(SW1_SECRET).verify(b'{"type": "a"}', dict(request.headers))  # SDK agrees


def test_standard_v1a_next_to_foreign_v1() -> None:
    foreign_v1 = "v1," + b64(
        hmac_digest(b"o" * 24, f"msg_p5jXN8AQM9LWM0D4loKWxJek.{NOW}.".encode() + b'{"test": 2432232314}')
    )
    for v1a in ("v1a,", "v1a," + b64(bytes(63)), "v1a," + b64(bytes(64)), "v1a," + b64(bytes(65))):
        with pytest.raises(VerificationError):
            PROVIDERS["standard"].verify(standard_request(f"{foreign_v1} {v1a}"), MIXED, now=NOW)


# -- base.first_match: defence in depth for every kind ----------------------------------------------


@pytest.mark.parametrize(
    ("digest", "candidates"),
    [
        (b"", [b""]),
        (b"", [b"", b"x"]),
        (b"\x01" * 32, [b""]),
        (b"\x01" * 32, [b"\x01" * 31]),
        (b"\x01" * 32, [b"\x01" * 33, b"\x01" * 16]),
    ],
)
def test_first_match_never_matches_empty_or_other_lengths(digest: bytes, candidates: list[bytes]) -> None:
    with pytest.raises(VerificationError) as exc:
        first_match(["s"], lambda secret: digest, candidates)
    assert exc.value.reason == "signature_mismatch"
    assert (
        first_match(["a", "s"], lambda secret: b"\x01" * 32 if secret == "s" else b"", [*candidates, b"\x01" * 32]) == 1
    )


# -- empty keys are refused at start-up --------------------------------------------------------------

EMPTY_KEYS = [
    ("stripe", ""),
    ("github", ""),
    ("shopify", ""),
    ("slack", ""),
    ("twilio", ""),
    ("hmac", ""),
    ("standard", "whsec_"),
    ("standard", ""),
    ("standard", "whsec_="),
    ("adyen", ""),
    ("adyen", "  "),
    ("sendgrid", ""),
    ("checkout", ""),
    ("checkout", " cko-key"),
    ("checkout", "pk_sbox_xxxxxxxxxxxxxxxxxxxxxxxx"),
    ("paystack", ""),
    ("paystack", "sk_test_"),
    ("paystack", "pk_test_5f3ae2e7c0d4b1a9e8f7a6b5c4d3e2f1a0b9c8d7"),
    ("paystack", "5f3ae2e7c0d4b1a9e8f7a6b5c4d3e2f1a0b9c8d7"),
    ("lemonsqueezy", ""),
    ("lemonsqueezy", "short"),
    ("lemonsqueezy", "ls-signing-secret\n"),
    ("razorpay", ""),
    ("paddle", ""),
    ("paddle", "pdl_"),
    ("paddle", "ntfset_01gkpjp8bkh3ajkf6jj1zzss3z"),
    ("gocardless", ""),
    ("square", ""),
    ("square", " sq-signature-key"),
    ("zoom", ""),
    ("zoom", "zoom-secret-token\n"),
    ("mailgun", ""),
    ("mailgun", " mailgun-signing-key"),
    ("braintree", ""),
    ("braintree", "bt_fuzz_public:"),
    ("braintree", ":bt-fuzz-private-key"),
    ("braintree", "bt-fuzz-private-key"),
    ("mollie", ""),
    ("mercadopago", ""),
]


@pytest.mark.parametrize(("kind", "secret"), EMPTY_KEYS)
def test_empty_key_is_refused_at_start_up(kind: str, secret: str) -> None:
    endpoint = replace(ENDPOINTS[kind], name="named-endpoint", secrets=(secret,))
    with pytest.raises(ConfigError, match="'named-endpoint'"):
        PROVIDERS[kind].validate(endpoint)
    with pytest.raises(ConfigError, match="'named-endpoint'"):
        PROVIDERS[kind].validate(replace(endpoint, secrets=(*ENDPOINTS[kind].secrets, secret)))
    PROVIDERS[kind].validate(replace(ENDPOINTS[kind], name="named-endpoint"))  # the real one is fine


# -- Stripe: unparsable v1 entries are ignored when another matches (stripe-python) ------------------

STRIPE_SECRET = ENDPOINTS["stripe"].secrets[0]


def stripe_header(*extra: str, valid: bool = True) -> str:
    header = stripe.WebhookSignature._compute_signature(f"{NOW}.{BODY.decode()}", STRIPE_SECRET)
    return ",".join([f"t={NOW}", *extra, *([f"v1={header}"] if valid else [])])


@pytest.mark.parametrize(
    "extra",
    [
        ["v1=zz"],
        ["v1=abc"],
        ["v1="],
        ["garbage"],
        ["v1=zz", "noequals", "v0=zz"],
        ["v1=" + "ab" * 31],
        ["v1=" + "ab" * 33],
    ],
)
def test_stripe_ignores_unparsable_entries_next_to_a_valid_one(extra: list[str]) -> None:
    header = stripe_header(*extra)
    stripe.WebhookSignature.verify_header(BODY.decode(), header, STRIPE_SECRET, tolerance=None)  # the SDK accepts
    request = Request({"stripe-signature": header}, BODY)
    assert PROVIDERS["stripe"].verify(request, ENDPOINTS["stripe"], now=NOW).events[0].event_id == "evt_1"


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        (["v1=zz"], "malformed_signature"),
        (["v1=", "v1=abc"], "malformed_signature"),
        (["noequals"], "missing_signature"),
        ([], "missing_signature"),
        (["v0=" + "ab" * 32], "missing_signature"),
        (["v1=" + "ab" * 32], "signature_mismatch"),
    ],
)
def test_stripe_without_a_usable_v1(extra: list[str], reason: str) -> None:
    request = Request({"stripe-signature": stripe_header(*extra, valid=False)}, BODY)
    with pytest.raises(VerificationError) as exc:
        PROVIDERS["stripe"].verify(request, ENDPOINTS["stripe"], now=NOW)
    assert exc.value.reason == reason


# -- one signature, one event: replay keys ------------------------------------------------------------

REPLAY_KEYED = {"github", "shopify", "twilio", "hmac", "paypal", "razorpay", "mailgun", "plaid"}
UNSIGNED = {  # headers a sender may change without touching the signature
    "github": ["x-github-delivery", "x-github-event"],
    "shopify": ["x-shopify-webhook-id", "x-shopify-topic"],
    "twilio": ["i-twilio-idempotency-token"],
    "hmac": ["x-type"],
    "paypal": ["paypal-cert-url"],
    "lemonsqueezy": ["x-event-name"],
    "razorpay": ["x-razorpay-event-id"],
    "sns": ["x-amz-sns-message-type", "x-amz-sns-topic-arn", "x-amz-sns-subscription-arn"],
}


@pytest.mark.parametrize("kind", KINDS)
def test_replay_key_only_where_nothing_unique_is_signed(kind: str) -> None:
    request = genuine(kind)
    if kind == "hmac":  # the fuzz endpoint takes its id from the body: give it an id header instead
        endpoint = replace(
            ENDPOINTS["hmac"], options={**ENDPOINTS["hmac"].options, "id_path": None, "id_header": "X-Id"}
        )
        request = Request({**request.headers, "x-id": "d1"}, request.body, request.url)
    result = provider_of(kind).verify(request, endpoint if kind == "hmac" else ENDPOINTS[kind], now=NOW)
    if kind not in REPLAY_KEYED:
        assert result.replay_key is None
        return
    tag = {
        "github": "github-sha256",
        "shopify": "shopify-hmac",
        "twilio": "twilio",
        "hmac": "hmac-sha256",
        "razorpay": "razorpay-sha256",
    }
    if kind == "paypal":
        assert result.replay_key == replay_key("paypal", request.headers["paypal-transmission-id"])
    elif kind == "mailgun":  # the signed token, inside the body
        assert result.replay_key == replay_key("mailgun", json.loads(request.body)["signature"]["token"])
    elif kind == "plaid":  # the JWS signing input: ECDSA's other (r, n - s) signature is the same event
        assert result.replay_key == replay_key(
            "plaid-es256", request.headers["plaid-verification"].rsplit(".", 1)[0].encode()
        )
    else:
        header, parse, _ = CODECS[kind]
        assert result.replay_key == replay_key(tag[kind], parse(request.headers[header]))


@pytest.mark.parametrize("kind", KINDS)
@SHAPES
@given(data=st.data())
def test_unsigned_parts_never_make_a_second_event(kind: str, data: st.DataObject) -> None:
    """Vary every header the signature does not cover (ids, topics, tokens, the Host): whatever
    still verifies has the same event ids or the same replay key."""
    request = genuine(kind)
    endpoint = ENDPOINTS[kind]
    first = provider_of(kind).verify(request, endpoint, now=NOW)
    headers = dict(request.headers)
    for name in [*UNSIGNED.get(kind, []), *(h for h in headers if h.endswith(("-id", "-topic", "-event")))]:
        if data.draw(st.booleans()):
            headers[name] = data.draw(
                st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=40)
            )
    host = data.draw(st.sampled_from(["example.com", "evil.example", "10.0.0.7:8000", "example.com:443"]))
    url = request.url.replace("example.com", host, 1)
    try:
        second = provider_of(kind).verify(Request(headers, request.body, url), endpoint, now=NOW)
    except (VerificationError, UnavailableError):
        return
    same_ids = [e.event_id for e in second.events] == [e.event_id for e in first.events]
    assert same_ids or (first.replay_key is not None and second.replay_key == first.replay_key), kind


def test_replay_keys_differ_between_signatures() -> None:
    keys = set()
    for n in range(5):
        body = BODY.replace(b"evt_1", f"evt_{n}".encode())
        for kind in ("github", "shopify", "hmac"):
            request = signed(kind, body)
            keys.add(provider_of(kind).verify(request, ENDPOINTS[kind], now=NOW).replay_key)
    assert len(keys) == 15 and None not in keys
    assert replay_key("github-sha256", b"x") != replay_key("shopify-hmac", b"x")


def test_hash_is_of_the_signature_not_the_body() -> None:
    """Same body, another secret (rotation): a different signature, so a different key."""
    body = BODY
    one = provider_of("github").verify(signed("github", body), ENDPOINTS["github"], now=NOW).replay_key
    other_endpoint = replace(ENDPOINTS["github"], secrets=("gh-secret-2",))
    _, headers = provider_of("github").sign(other_endpoint, body, now=NOW)
    two = (
        provider_of("github")
        .verify(Request({k.lower(): v for k, v in headers.items()}, body), other_endpoint, now=NOW)
        .replay_key
    )
    assert one != two and one != hashlib.sha256(body).hexdigest()


def test_adyen_item_signatures_of_every_shape_never_verify() -> None:
    """The per-item ``hmacSignature`` (the header variant is covered above with the other kinds)."""
    import json

    endpoint = ENDPOINTS["adyen"]
    item = {
        "pspReference": "7914073381342284",
        "merchantAccountCode": "TestMerchant",
        "merchantReference": "r1",
        "amount": {"value": 1130, "currency": "EUR"},
        "eventCode": "AUTHORISATION",
        "success": "true",
    }
    raw = json.dumps({"notificationItems": [{"NotificationRequestItem": item}]}).encode()
    body, _ = PROVIDERS["adyen"].sign(endpoint, raw, now=NOW)
    PROVIDERS["adyen"].verify(Request({}, body), endpoint, now=NOW)
    data = json.loads(body)
    extra = data["notificationItems"][0]["NotificationRequestItem"]["additionalData"]
    real = base64.b64decode(extra["hmacSignature"])
    for bad in mangled(real):
        extra["hmacSignature"] = b64(bad)
        assert refused("adyen", Request({}, json.dumps(data).encode())), f"{len(bad)} bytes verified"
