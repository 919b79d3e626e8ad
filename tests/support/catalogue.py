"""Every provider kind configured as an endpoint (secrets, keys, options), the payload each sends,
and one genuine delivery signed as the provider would: shared by the catalogue, replay and
quarantine tests."""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import time
from typing import Any

from flask import Flask

from tests.conftest import ADYEN_KEY, PAYLOADS, STRIPE_SECRET
from tests.fake_apis import serve
from webhooks import providers
from webhooks.testing import keys
from webhooks.testing.keys import PLAID_KID

PUBLIC_TWILIO = "https://hooks.example.com/twilio/inbound"
HOST = "hooks.example.com"
PAYSTACK_KEY = "sk_test_5f3ae2e7c0d4b1a9e8f7a6b5c4d3e2f1a0b9c8d7"
SENT = {  # kind → payload file sent through `webhooks send`
    "stripe": "stripe/payment_intent.succeeded__basic.json",
    "adyen": "adyen/CAPTURE__batch.json",
    "standard": "standard/user.created__spec_example.json",
    "github": "github/issues__opened.json",
    "shopify": "shopify/orders_paid__basic.json",
    "slack": "slack/app_mention__event_callback.json",
    "twilio": "twilio/message_status__delivered.txt",
    "sendgrid": "sendgrid/batch__delivery_engagement.json",
    "paypal": "paypal/payment.capture.completed__basic.json",
    "hmac": "hmac/invoice.created__basic.json",
    "checkout": "checkout/payment_captured__basic.json",
    "paystack": "paystack/charge.success__card.json",
    "lemonsqueezy": "lemonsqueezy/order_created__basic.json",
    "razorpay": "razorpay/payment.captured__card.json",
    "paddle": "paddle/transaction.completed__card.json",
    "gocardless": "gocardless/payments__batch.json",
    "square": "square/payment.updated__completed.json",
    "zoom": "zoom/meeting.started__basic.json",
    "mailgun": "mailgun/delivered__basic.json",
    "braintree": "braintree/subscription_charged_successfully__monthly.xml",
    "sns": "sns/Notification__docs_example.json",
    "plaid": "plaid/TRANSACTIONS.SYNC_UPDATES_AVAILABLE__basic.json",
    "mollie": "mollie/payment-link.paid__signed.json",
    "mercadopago": "mercadopago/payment.updated__basic.json",
}
SNS_CERT_URL = "https://sns.us-west-2.amazonaws.com/SimpleNotificationService-f3ecfb7224c7233fe7bb5f59f96de52f.pem"


_RUNNING = contextlib.ExitStack()
MERCADOPAGO_TOKEN = "TEST-7719417112948541-012318-4f4ee0ce29fd7f3f4f0d3b26e6a2d8c0-724484980"


@functools.cache
def mercadopago_api() -> str:
    """A fake Mercado Pago API on 127.0.0.1 for the whole test run (Mercado Pago signs no body: the
    worker fetches every payment): any ``/v1/payments/<digits>`` is an approved payment."""

    def route(method: str, path: str, query: Any, headers: Any, body: bytes) -> tuple[int, Any]:
        payment = path.removeprefix("/v1/payments/")
        if not payment.isdigit() or headers.get("Authorization") != f"Bearer {MERCADOPAGO_TOKEN}":
            return 404, {"message": "not found", "status": 404}
        return 200, {"id": int(payment), "status": "approved", "transaction_amount": 58.8, "currency_id": "BRL"}

    return _RUNNING.enter_context(serve(route))  # kept open (and referenced) until the run ends


MAILGUN_API_KEY = "key-catalogue-mailgun"


@functools.cache
def mailgun_api() -> str:
    """A fake Mailgun Events API on 127.0.0.1 for the whole test run (Mailgun signs no event data:
    the worker acts on its event log's copy): the log holds the catalogue's delivered event."""
    logged = json.loads((PAYLOADS / SENT["mailgun"]).read_bytes())["event-data"]
    auth = "Basic " + base64.b64encode(f"api:{MAILGUN_API_KEY}".encode()).decode()

    def route(method: str, path: str, query: Any, headers: Any, body: bytes) -> tuple[int, Any]:
        if headers.get("Authorization") != auth or path != "/v3/mg.example.com/events":
            return 401, {"message": "Invalid private key"}
        return 200, {"items": [logged], "paging": {}}

    return _RUNNING.enter_context(serve(route))


@functools.cache
def key_material() -> tuple[tuple[str, str], tuple[str, str], tuple[str, str]]:
    """The catalogue's PayPal certificate and key, SendGrid pair and Plaid key with its JWK, made
    once per test process: a 2048-bit RSA key takes 50–200 ms to make, and the catalogue was built
    hundreds of times a run (3.7 % of the fast tier's samples). Every app of a process verifies
    with the same test keys; ``webhooks.testing`` still makes fresh ones per call."""
    return keys.certificate(), keys.sendgrid_pair(), keys.plaid_pair(PLAID_KID)


def endpoints() -> dict[str, dict[str, Any]]:
    (cert, key), (sg_public, sg_private), (plaid_key, plaid_jwk) = key_material()
    return {
        "stripe": {"secrets": ["whsec_old_one", STRIPE_SECRET]},
        "adyen": {"secrets": [ADYEN_KEY]},
        "standard": {"secrets": ["whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]},
        "github": {"secrets": ["old-gh-secret", "It's a Secret to Everybody"]},
        "shopify": {"secrets": ["old-shop-secret", "shop-secret"], "topic": "orders/paid"},
        "slack": {"secrets": ["old-slack-secret", "8f742231b10e8888abcd99yyyzzz85a5"]},
        "twilio": {"secrets": ["old-token", "12345"], "public_url": PUBLIC_TWILIO},
        "sendgrid": {"secrets": [sg_public], "signing_key": sg_private},
        "paypal": {"secrets": [], "webhook_id": "WH-1T2Y3", "certificate": cert, "signing_key": key},
        "hmac": {
            "secrets": ["old-generic", "generic-secret"],
            "header": "X-Signature",
            "algorithm": "sha256",
            "encoding": "hex",
            "prefix": "sha256=",
            "id_path": "id",
            "type_path": "type",
        },
        "checkout": {"secrets": ["old-cko-signature-key", "cko-signature-key"]},
        "paystack": {"secrets": ["sk_test_0ld0000000000000000000000000000000000000", PAYSTACK_KEY]},
        "lemonsqueezy": {"secrets": ["old-ls-secret", "ls-signing-secret"]},
        "razorpay": {"secrets": ["old-rzp-secret", "rzp-webhook-secret"]},
        "paddle": {
            "secrets": ["pdl_ntfset_01old_x", "pdl_ntfset_01gkpjp8bkh3ajkf6jj1zzss3z_WvRO0eL4Bj9rgYYIBZY6wZhG4EHy9jzh"]
        },
        "gocardless": {"secrets": ["old-gc-secret", "ED7D658C-D8EB-4941-948B-3973214F2D49"]},
        "square": {
            "secrets": ["old-square-key", "square-signature-key"],
            "notification_url": f"https://{HOST}/webhooks/square",
        },
        "zoom": {"secrets": ["old-zoom-token", "zoom-secret-token"]},
        "mailgun": {
            "secrets": ["old-mailgun-key", "mailgun-signing-key"],
            "api_key": MAILGUN_API_KEY,
            "domain": "mg.example.com",
            "api_base": mailgun_api(),
        },
        "braintree": {"secrets": ["old_bt_public:old-bt-private-key", "bt_public_live:bt-private-key-0001"]},
        "sns": {
            "secrets": [],
            "topic_arns": ["arn:aws:sns:us-west-2:123456789012:MyTopic"],
            "certificate": cert,  # pinned: the tests never fetch from AWS
            "signing_key": key,
            "cert_url": SNS_CERT_URL,
        },
        "plaid": {"secrets": [], "verification_key": plaid_jwk, "signing_key": plaid_key, "key_id": PLAID_KID},
        "mollie": {"secrets": ["old-mollie-secret", "mollie-signing-secret"]},
        "mercadopago": {
            "secrets": ["old-mp-secret", "your_secret_key_here"],
            "access_token": MERCADOPAGO_TOKEN,
            "api_base": mercadopago_api(),
        },
    }


HMAC_BY_HEADER = {
    "provider": "hmac",
    "secrets": ["generic-secret"],
    "header": "X-Signature",
    "prefix": "sha256=",
    "id_header": "X-Event-Id",
    "type_header": "X-Event-Type",
}


def all_endpoints() -> dict[str, dict[str, Any]]:
    config = {name: {"provider": name, **values} for name, values in endpoints().items()}
    config["hmac_by_header"] = HMAC_BY_HEADER
    return config


def genuine(app: Flask, name: str, payload: bytes | None = None) -> tuple[bytes, dict[str, str], str]:
    """One delivery exactly as the provider would sign it now: (body, headers, path with query)."""
    endpoint = app.extensions["webhooks"].settings.endpoints[name]
    provider = providers.get(endpoint.kind)
    kind = endpoint.kind
    raw = payload if payload is not None else (PAYLOADS / SENT[kind]).read_bytes()
    url = provider.post_url(PUBLIC_TWILIO if kind == "twilio" else f"https://{HOST}/webhooks/{name}", raw)
    body, headers = provider.sign(endpoint, raw, now=time.time(), url=url)
    if kind == "hmac" and endpoint.options.get("id_header"):
        headers |= {"X-Event-Id": "evt-genuine", "X-Event-Type": "invoice.paid"}
    query = url.partition("?")[2]
    return body, headers, f"/webhooks/{name}" + (f"?{query}" if query else "")
