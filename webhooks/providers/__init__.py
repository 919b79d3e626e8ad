"""The explicit registry of provider kinds: kind name → provider instance."""

from __future__ import annotations

from webhooks.errors import ConfigError
from webhooks.providers.adyen import Adyen
from webhooks.providers.base import Endpoint, Provider
from webhooks.providers.braintree import Braintree
from webhooks.providers.checkout import Checkout
from webhooks.providers.generic import GenericHmac
from webhooks.providers.github import GitHub
from webhooks.providers.gocardless import GoCardless
from webhooks.providers.lemonsqueezy import LemonSqueezy
from webhooks.providers.mailgun import Mailgun
from webhooks.providers.mercadopago import MercadoPago
from webhooks.providers.mollie import Mollie
from webhooks.providers.paddle import Paddle
from webhooks.providers.paypal import PayPal
from webhooks.providers.paystack import Paystack
from webhooks.providers.plaid import Plaid
from webhooks.providers.razorpay import Razorpay
from webhooks.providers.sendgrid import SendGrid
from webhooks.providers.shopify import Shopify
from webhooks.providers.slack import Slack
from webhooks.providers.sns import Sns
from webhooks.providers.square import Square
from webhooks.providers.standard import Standard
from webhooks.providers.stripe import Stripe
from webhooks.providers.twilio import Twilio
from webhooks.providers.zoom import Zoom

PROVIDERS: dict[str, Provider] = {
    p.kind: p
    for p in (
        Stripe(),
        Adyen(),
        Standard(),
        GitHub(),
        Shopify(),
        Slack(),
        Twilio(),
        SendGrid(),
        PayPal(),
        Braintree(),
        Checkout(),
        Paystack(),
        LemonSqueezy(),
        Razorpay(),
        Paddle(),
        GoCardless(),
        Square(),
        Zoom(),
        Mailgun(),
        Sns(),
        Plaid(),
        Mollie(),
        MercadoPago(),
        GenericHmac(),
    )
}


def get(kind: str) -> Provider:
    try:
        return PROVIDERS[kind]
    except KeyError:
        raise ConfigError(f"unknown provider kind {kind!r} (known: {', '.join(sorted(PROVIDERS))})") from None


def shorthands() -> dict[str, tuple[str, str, str]]:
    """Environment shorthand → (endpoint name, kind, field), from each kind's ``Provider.shorthands``."""
    return {variable: (p.kind, p.kind, name) for p in PROVIDERS.values() for variable, name in p.shorthands.items()}


__all__ = ["PROVIDERS", "Endpoint", "Provider", "get", "shorthands"]
