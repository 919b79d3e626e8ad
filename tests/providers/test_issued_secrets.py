"""Where the receiver may choose a signing secret (the admin API's new secret without a value), the
kind issues one in the shape it verifies (``Provider.issue_secret``); the others' providers issue
their own."""

from __future__ import annotations

from datetime import UTC, datetime

import standardwebhooks

from webhooks.configuration.destinations import MIN_KEY_BYTES
from webhooks.configuration.destinations import key as destination_key
from webhooks.providers import PROVIDERS
from webhooks.providers.base import Endpoint, Request
from webhooks.providers.generic import GenericHmac
from webhooks.providers.standard import Standard

NOW = 1_700_000_000


def test_generated_standard_secrets_verify_as_the_kind_and_the_sdk_expect() -> None:
    secret = PROVIDERS["standard"].issue_secret()
    assert secret.startswith("whsec_") and secret != PROVIDERS["standard"].issue_secret()
    endpoint = Endpoint("svc", "standard", (secret,))
    Standard().validate(endpoint)
    body = '{"type":"ping"}'
    signature = standardwebhooks.Webhook(secret).sign("msg_1", datetime.fromtimestamp(NOW, UTC), body)
    headers = {"webhook-id": "msg_1", "webhook-timestamp": str(NOW), "webhook-signature": signature}
    verified = Standard().verify(Request(headers, body.encode()), endpoint, now=NOW)  # the SDK signed it
    assert (verified.events[0].event_id, verified.events[0].event_type) == ("msg_1", "ping")
    assert len(destination_key(secret)) >= MIN_KEY_BYTES  # a destination's secret too


def test_generated_hmac_secrets_verify_as_the_kind_expects() -> None:
    secret = PROVIDERS["hmac"].issue_secret()
    assert len(secret) == 64 and int(secret, 16) >= 0 and secret != PROVIDERS["hmac"].issue_secret()
    endpoint = Endpoint("svc", "hmac", (secret,), options={"header": "X-Signature"})
    GenericHmac().validate(endpoint)
    body, headers = GenericHmac().sign(endpoint, b"{}", now=NOW)
    assert GenericHmac().verify(Request({k.lower(): v for k, v in headers.items()}, body), endpoint, now=NOW).events


def test_a_kind_whose_provider_issues_the_secret_issues_none_here() -> None:
    issuing = sorted(kind for kind, provider in PROVIDERS.items() if provider.issue_secret() is not None)
    assert issuing == ["hmac", "standard"]
