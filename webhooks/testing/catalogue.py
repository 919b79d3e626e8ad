"""What ``webhooks.testing`` offers by name: the real payloads the project is tested with (packaged
as ``webhooks/testing/payloads/<kind>/<name>``; in a source checkout, ``tests/payloads``), and a
test endpoint of every kind with its key material."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from webhooks.testing import keys
from webhooks.testing.apis import MAILGUN_API_KEY, MAILGUN_DOMAIN, MERCADOPAGO_TOKEN

HERE = Path(__file__).resolve().parent


def payload_dir() -> Path:
    """The payloads: packaged beside this module in a wheel, ``tests/payloads`` in a checkout
    (an editable install maps the package, not its data directory)."""
    packaged = HERE / "payloads"
    return packaged if packaged.is_dir() else HERE.parent.parent / "tests" / "payloads"


def payload_names(kind: str | None = None) -> list[str]:
    """Every payload's name, ``<kind>/<file name>`` (of one kind with ``kind``)."""
    root = payload_dir()
    return sorted(
        f"{p.parent.name}/{p.name}"
        for p in root.glob(f"{kind or '*'}/*")
        if p.is_file() and not p.name.startswith((".", "_"))
    )


def payload(name: str, kind: str | None = None) -> bytes:
    """A payload's bytes by name: ``stripe/payment_intent.succeeded__basic.json``, or with ``kind``
    given, ``payment_intent.succeeded__basic`` (the file name, its extension optional)."""
    root = payload_dir()
    if "/" not in name and kind is not None:
        name = f"{kind}/{name}"
    path = root / name
    if not path.is_file():
        matches = sorted(root.glob(f"{name}.*"))
        if len(matches) != 1:
            known = ", ".join(payload_names(name.split("/")[0])) or ", ".join(
                sorted({n.split("/")[0] for n in payload_names()})
            )
            raise LookupError(f"no payload {name!r} (there are: {known})")
        path = matches[0]
    if path.resolve().parent.parent != root.resolve():
        raise LookupError(f"no payload {name!r}")
    return path.read_bytes()


# The event log a kind's worker reads instead of the delivered data, and the key of the delivered
# body that the log holds (``apis.ProviderAPIs``; the client logs what it sends).
LOGGED = {"mailgun": "event-data"}
SECRETS = {  # kind → its one test secret (the kinds that sign with a shared secret)
    "stripe": "whsec_webhooks_testing",
    "adyen": "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056",
    "standard": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    "github": "webhooks-testing-github",
    "shopify": "webhooks-testing-shopify",
    "slack": "webhooks-testing-slack",
    "twilio": "webhooks-testing-twilio",
    "hmac": "webhooks-testing-hmac",
    "checkout": "webhooks-testing-checkout",
    "paystack": "sk_test_webhooks_testing",
    "lemonsqueezy": "webhooks-testing-lemonsqueezy",
    "razorpay": "webhooks-testing-razorpay",
    "paddle": "pdl_ntfset_01webhookstesting_webhooks-testing-paddle",
    "gocardless": "webhooks-testing-gocardless",
    "square": "webhooks-testing-square",
    "zoom": "webhooks-testing-zoom",
    "mailgun": "webhooks-testing-mailgun",
    "braintree": "webhooks_public:webhooks-testing-braintree",
    "mollie": "webhooks-testing-mollie",
    "mercadopago": "webhooks-testing-mercadopago",
}


def endpoints(api_base: str, base_url: str = "http://localhost") -> dict[str, dict[str, Any]]:
    """One test endpoint of every kind, named by its kind, as ``webhooks.toml``'s tables:
    shared-secret kinds with ``SECRETS``' secret, key-signing kinds with fresh keys (``keys``),
    Mailgun and Mercado Pago asking ``api_base`` (``apis.ProviderAPIs``); URL-signing kinds
    (Twilio, Square) sign the URL the test client posts to under ``base_url``."""
    cert, key = keys.certificate()
    sns_cert, sns_key = keys.certificate("sns.us-west-2.amazonaws.com")
    sg_public, sg_private = keys.sendgrid_pair()
    plaid_key, plaid_jwk = keys.plaid_pair()
    tables: dict[str, dict[str, Any]] = {kind: {"secrets": [secret]} for kind, secret in SECRETS.items()}
    tables["shopify"]["topic"] = "orders/paid"
    tables["hmac"].update(header="X-Signature", prefix="sha256=", id_path="id", type_path="type")
    tables["square"]["notification_url"] = f"{base_url}/webhooks/square"
    tables["twilio"]["public_url"] = f"{base_url}/webhooks/twilio"
    tables["mailgun"].update(api_key=MAILGUN_API_KEY, domain=MAILGUN_DOMAIN, api_base=api_base)
    tables["mercadopago"].update(access_token=MERCADOPAGO_TOKEN, api_base=api_base)
    tables["sendgrid"] = {"secrets": [sg_public], "signing_key": sg_private}
    tables["paypal"] = {"secrets": [], "webhook_id": "WH-WEBHOOKS-TESTING", "certificate": cert, "signing_key": key}
    tables["sns"] = {
        "secrets": [],
        "topic_arns": ["arn:aws:sns:us-west-2:123456789012:MyTopic"],
        "certificate": sns_cert,
        "signing_key": sns_key,
        "cert_url": "https://sns.us-west-2.amazonaws.com/SimpleNotificationService-webhooks-testing.pem",
    }
    tables["plaid"] = {"secrets": [], "verification_key": plaid_jwk, "signing_key": plaid_key, "key_id": keys.PLAID_KID}
    return {kind: {"provider": kind, **table} for kind, table in tables.items()}
