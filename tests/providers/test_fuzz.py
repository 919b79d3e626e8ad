"""Fuzz every provider's ``verify``: random, truncated, repeated and re-signed inputs raise only the
documented ``VerificationError`` (``PayloadError`` included) — or, for PayPal's certificate fetch,
``UnavailableError`` — and never accept a request whose signature is not genuine.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.signing import ENDPOINTS, NOW, provider, signed
from webhooks.errors import UnavailableError, VerificationError
from webhooks.providers import PROVIDERS
from webhooks.providers.base import Endpoint, Request

# Headers each kind reads, beyond those its own ``sign`` produces.
EXTRA_HEADERS = {
    "standard": ["svix-signature", "svix-id", "svix-timestamp"],
    "shopify": ["shopify-hmac-sha256", "shopify-webhook-id", "shopify-topic"],
    "twilio": ["x-twilio-webhooks-signature-settings"],
    "adyen": ["hmacsignature", "authorization"],
    "hmac": ["x-type"],
    "square": ["x-square-signature"],
}
RAISES = (VerificationError, UnavailableError)


def header_names(kind: str) -> list[str]:
    body = b'{"id": "x"}' if kind != "twilio" else b"a=b"
    return sorted(set(signed(kind, body).headers) | set(EXTRA_HEADERS.get(kind, [])))


def check(kind: str, request: Request, *, genuine: bool) -> None:
    """``verify`` returns or raises a documented error; a non-genuine request never passes."""
    p, endpoint = provider(kind), ENDPOINTS[kind]
    try:
        p.verify(request, endpoint, now=NOW)
    except RAISES:
        return
    assert genuine, f"{kind}: a request that was not signed verified"


# Header values as WSGI delivers them: latin-1 text (no CR/LF), possibly empty or huge.
header_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=120)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=20,
)
bodies = st.one_of(
    st.binary(max_size=300),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.dictionaries(
        st.sampled_from(
            [
                "id",
                "type",
                "created",
                "data",
                "event",
                "event_id",
                "notificationItems",
                "resource",
                "event_type",
                "sg_event_id",
                "payload",
                "action",
                "webhook_type",
                "webhook_code",
            ]
        ),
        json_values,
        max_size=6,
    ).map(lambda v: json.dumps(v).encode()),
)
FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KINDS = sorted(PROVIDERS)


def test_every_provider_is_fuzzed() -> None:
    assert set(ENDPOINTS) == set(PROVIDERS)


@pytest.mark.parametrize("kind", KINDS)
@FUZZ
@given(data=st.data(), body=bodies)
def test_random_headers_and_bodies(kind: str, data: st.DataObject, body: bytes) -> None:
    names = header_names(kind)
    headers = data.draw(st.dictionaries(st.sampled_from(names), header_text, max_size=len(names)))
    host = data.draw(st.sampled_from(["example.com", "example.com:abc", "[::1", "example.com:99999", "ex ample"]))
    check(kind, Request(headers, body, f"https://{host}/webhooks/fuzz?x=1"), genuine=False)


@pytest.mark.parametrize("kind", KINDS)
@FUZZ
@given(body=bodies)
def test_genuine_signature_over_any_body(kind: str, body: bytes) -> None:
    """A valid signature over garbage: accepted, or a documented error (``malformed_payload``)."""
    try:
        request = signed(kind, body)
    except (ValueError, NotImplementedError, VerificationError):
        return  # the test signer itself cannot sign this body (Twilio forms, …)
    check(kind, request, genuine=True)


@functools.cache
def genuine_delivery(kind: str) -> tuple[bytes, Request]:
    """One signed delivery per kind, made once: ECDSA signatures (SendGrid) are randomized, and
    hypothesis needs every example of a test to draw from the same values."""
    body = b'{"id": "evt_1", "type": "t", "data": {"id": 1}}' if kind != "twilio" else b"CallSid=CA1&CallStatus=ringing"
    if kind == "braintree":  # signs a notification's XML (inside a form body)
        body = b'<notification><timestamp type="datetime">x</timestamp><kind>check</kind></notification>'
    request = signed(kind, body)
    return request.body, request  # the body as signed (SNS's is the message around it)


@pytest.mark.parametrize("kind", KINDS)
@FUZZ
@given(data=st.data())
def test_mutated_signature_headers(kind: str, data: st.DataObject) -> None:
    """Truncated, repeated (joined by ", " as WSGI joins them), or edited signature headers."""
    body, request = genuine_delivery(kind)
    headers: dict[str, Any] = dict(request.headers)
    name = data.draw(st.sampled_from(sorted(headers)))
    value = headers[name]
    mutation = data.draw(st.sampled_from(["truncate", "repeat", "edit", "drop", "body"]))
    if mutation == "truncate":
        headers[name] = value[: data.draw(st.integers(0, max(len(value) - 1, 0)))]
    elif mutation == "repeat":
        headers[name] = f"{value}, {value}"
    elif mutation == "edit":
        at = data.draw(st.integers(0, max(len(value) - 1, 0)))
        headers[name] = value[:at] + data.draw(header_text) + value[at + 1 :]
    elif mutation == "drop":
        del headers[name]
    # SNS signs fields, not bytes: its body is changed inside a signed field (the Message).
    changed = body.replace(b'"Message": "', b'"Message": " ', 1) if kind == "sns" else body + b" "
    mutated = changed if mutation == "body" else body
    genuine = headers == dict(request.headers) and mutated == body
    try:
        provider(kind).verify(Request(headers, mutated, request.url), ENDPOINTS[kind], now=NOW)
    except RAISES:
        return
    # Some headers are not signed (ids, types, a repeated id joined with itself): only a change of
    # a signed part must fail. The body is signed by every provider.
    assert mutation != "body" or genuine, f"{kind}: a modified body verified"


# Shapes a forger would try: Adyen items whose fields have the wrong types, Twilio URLs with
# hostile Host headers, PayPal certificate URLs that do not parse.
adyen_items = st.fixed_dictionaries(
    {},
    optional={
        "additionalData": json_values | st.fixed_dictionaries({"hmacSignature": json_values}),
        "amount": json_values | st.fixed_dictionaries({"value": json_values, "currency": json_values}),
        "pspReference": json_values,
        "eventCode": json_values,
        "success": json_values,
        "originalReference": json_values,
    },
)
hosts = st.sampled_from(["example.com", "example.com:abc", "[::1", "[::1]:99999", "example.com:-1", "a b", ""])


@FUZZ
@given(items=st.lists(adyen_items | json_values, min_size=1, max_size=3), wrap=st.booleans())
def test_adyen_forged_items(items: list[Any], wrap: bool) -> None:
    body = {"notificationItems": [{"NotificationRequestItem": i} for i in items] if wrap else items}
    check("adyen", Request({}, json.dumps(body).encode()), genuine=False)


@FUZZ
@given(host=hosts, query=header_text, signature=header_text, body=bodies)
def test_twilio_hostile_urls(host: str, query: str, signature: str, body: bytes) -> None:
    request = Request({"x-twilio-signature": signature or "AAAA"}, body, f"https://{host}/t?{query}")
    for endpoint in (ENDPOINTS["twilio"], Endpoint("twilio", "twilio", ("12345",))):
        try:
            provider("twilio").verify(request, endpoint, now=NOW)
        except RAISES:
            continue
        raise AssertionError("a forged Twilio request verified")


@FUZZ
@given(host=hosts, path=header_text)
def test_paypal_hostile_cert_urls(host: str, path: str) -> None:
    headers = {
        "paypal-transmission-id": "a",
        "paypal-transmission-time": "b",
        "paypal-transmission-sig": "AAAA",
        "paypal-cert-url": f"https://{host}/v1/notifications/certs/{path}",
        "paypal-auth-algo": "SHA256withRSA",
    }
    check("paypal", Request(headers, b"{}"), genuine=False)
