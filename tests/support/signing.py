"""One endpoint of every provider kind, and a genuine request for any body signed as that kind's
provider would (its own ``sign``; Adyen by header): what the fuzzers and the signature-shape tests
start from."""

from __future__ import annotations

import base64

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.support.paypal_cert import CERT, KEY_PEM
from webhooks.providers import PROVIDERS
from webhooks.providers.base import Endpoint, Provider, Request
from webhooks.providers.paypal import PayPal
from webhooks.providers.plaid_jose import jwk_of

NOW = 1_700_000_000
CERT_URL = "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-fuzz"
_SG_PRIVATE = ec.generate_private_key(ec.SECP256R1())
SG_PUBLIC = base64.b64encode(
    _SG_PRIVATE.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
).decode()
SG_PRIVATE = base64.b64encode(
    _SG_PRIVATE.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
).decode()
_PLAID_KEY = ec.generate_private_key(ec.SECP256R1())
PLAID_KID = "6c5516e1-92dc-479e-a8ff-5a51992e0001"
PLAID_SIGNING_KEY = _PLAID_KEY.private_bytes(
    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
).decode()
PLAID_JWK = jwk_of(_PLAID_KEY.public_key(), PLAID_KID)

SNS_TOPIC = "arn:aws:sns:us-east-1:123456789012:fuzz"  # the region of sns.DEFAULT_CERT_URL; sns.sign
# publishes any body that is no SNS message as the Message of a notification to it


ENDPOINTS: dict[str, Endpoint] = {
    "stripe": Endpoint("stripe", "stripe", ("whsec_fuzz",)),
    "adyen": Endpoint("adyen", "adyen", ("44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056",)),
    "standard": Endpoint(
        "standard",
        "standard",
        ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whpk_A6EHv/POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg="),
    ),
    "github": Endpoint("github", "github", ("gh-secret",)),
    "shopify": Endpoint("shopify", "shopify", ("shop-secret",)),
    "slack": Endpoint("slack", "slack", ("slack-secret",)),
    "twilio": Endpoint("twilio", "twilio", ("12345",), options={"public_url": "https://example.com/webhooks/fuzz"}),
    "sendgrid": Endpoint("sendgrid", "sendgrid", (SG_PUBLIC,), options={"signing_key": SG_PRIVATE}),
    "paypal": Endpoint(
        "paypal", "paypal", (), options={"webhook_id": "WH-FUZZ", "signing_key": KEY_PEM, "cert_url": CERT_URL}
    ),
    "hmac": Endpoint(
        "hmac",
        "hmac",
        ("s3cret",),
        options={
            "header": "X-Signature",
            "prefix": "sha256=",
            "timestamp_header": "X-Timestamp",
            "id_path": "data.id",
            "type_header": "X-Type",
        },
    ),
    "checkout": Endpoint("checkout", "checkout", ("cko-signature-key",)),
    "paystack": Endpoint("paystack", "paystack", ("sk_test_5f3ae2e7c0d4b1a9e8f7a6b5c4d3e2f1a0b9c8d7",)),
    "lemonsqueezy": Endpoint("lemonsqueezy", "lemonsqueezy", ("ls-signing-secret",)),
    "razorpay": Endpoint("razorpay", "razorpay", ("rzp-secret",)),
    "paddle": Endpoint("paddle", "paddle", ("pdl_ntfset_01hfuzz_secret",)),
    "gocardless": Endpoint("gocardless", "gocardless", ("gc-secret",)),
    "square": Endpoint(
        "square", "square", ("sq-signature-key",), options={"notification_url": "https://example.com/webhooks/fuzz"}
    ),
    "zoom": Endpoint("zoom", "zoom", ("zoom-secret-token",)),
    "mailgun": Endpoint(
        "mailgun", "mailgun", ("mailgun-signing-key",), options={"api_key": "key-fuzz", "domain": "mg.example.com"}
    ),
    "braintree": Endpoint("braintree", "braintree", ("bt_fuzz_public:bt-fuzz-private-key",)),
    "sns": Endpoint(
        "sns", "sns", (), options={"topic_arns": [SNS_TOPIC], "certificate": CERT.decode(), "signing_key": KEY_PEM}
    ),
    "plaid": Endpoint(
        "plaid",
        "plaid",
        (),
        options={"verification_key": PLAID_JWK, "signing_key": PLAID_SIGNING_KEY, "key_id": PLAID_KID},
    ),
    "mollie": Endpoint("mollie", "mollie", ("mollie-secret",)),
    "mercadopago": Endpoint("mercadopago", "mercadopago", ("mp-secret",), options={"access_token": "TEST-" + "1" * 32}),
}
URL = "https://example.com/webhooks/fuzz"


def provider(kind: str) -> Provider:
    if kind == "paypal":
        return PayPal(cert_loader=lambda url: CERT)
    return PROVIDERS[kind]


def signed(kind: str, body: bytes) -> Request:
    """A genuine request for ``body`` (Adyen: signed by header, which works for any body)."""
    p, endpoint = provider(kind), ENDPOINTS[kind]
    url = URL + f"?bodySHA256={__import__('hashlib').sha256(body).hexdigest()}" if kind == "twilio" else URL
    if kind == "adyen":
        from webhooks.providers.adyen import hmac_digest

        key = bytes.fromhex(endpoint.secrets[0])
        headers = {"HmacSignature": base64.b64encode(hmac_digest(key, body)).decode()}
    else:
        body, headers = p.sign(endpoint, body, now=NOW, url=url)
    return Request({k.lower(): v for k, v in headers.items()}, body, url)
