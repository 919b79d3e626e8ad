"""Every provider kind through a running server: ``webhooks send`` signs as the provider would and
the event is stored and processed; a tampered or unsigned delivery is refused with a reason code
and nothing is stored; rotation records the matched secret; Twilio verifies behind a proxy."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

import pytest
import requests
from click.testing import CliRunner
from werkzeug.serving import make_server

from tests.conftest import ADMIN_PASSWORD, PAYLOADS, free_port, wait_until
from tests.support.catalogue import SENT, endpoints
from tests.support.servers import serve_in_thread
from tests.support.templates import migrated
from webhooks import create_app, providers
from webhooks.configuration.settings import load
from webhooks.service.cli import main

SIGNATURE_HEADERS = {
    "stripe": ["Stripe-Signature"],
    "standard": ["webhook-signature"],
    "github": ["X-Hub-Signature-256"],
    "shopify": ["X-Shopify-Hmac-Sha256"],
    "slack": ["X-Slack-Signature"],
    "twilio": ["X-Twilio-Signature"],
    "sendgrid": ["X-Twilio-Email-Event-Webhook-Signature"],
    "paypal": ["PAYPAL-TRANSMISSION-SIG"],
    "hmac": ["X-Signature"],
    "adyen": ["HmacSignature"],
    "checkout": ["Cko-Signature"],
    "paystack": ["x-paystack-signature"],
    "lemonsqueezy": ["X-Signature"],
    "razorpay": ["X-Razorpay-Signature"],
    "paddle": ["Paddle-Signature"],
    "gocardless": ["Webhook-Signature"],
    "square": ["x-square-hmacsha256-signature"],
    "zoom": ["x-zm-signature"],
    "braintree": [],  # a field of the form body: BODY_SIGNED
    "sns": [],  # in the body: test_sns.py
    "plaid": ["Plaid-Verification"],
    "mollie": ["X-Mollie-Signature"],
    "mercadopago": ["x-signature"],
}
# Kinds whose signature is a form field of the body: a tamper of the signed field, and the field dropped.
BODY_SIGNED = {"braintree": ("bt_payload=PD94", "bt_payload=PD95", "bt_signature")}
REFUSED_STATUS = {"gocardless": 498}  # the status a provider asks for when a signature fails (else 400)
# Adyen and SNS sign fields, not bytes (test_adyen.py, test_sns.py); Mailgun signs a timestamp and token in the
# body (test_mailgun.py); Mercado Pago signs no body at all (what it signs is tampered with in test_mercadopago.py)
RAW_BODY_KINDS = [k for k in SENT if k not in ("adyen", "mailgun", "sns", "mercadopago")]


def toml(config: dict[str, dict[str, Any]]) -> str:
    lines = []
    for name, values in config.items():
        lines.append(f"[endpoints.{name}]\nprovider = {json.dumps(name)}")
        lines += [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """A running server (embedded worker on) with one endpoint of every kind."""
    tmp = tmp_path_factory.mktemp("catalogue")
    (tmp / "webhooks.toml").write_text(toml(endpoints()))
    env = {
        "WEBHOOKS_CONFIG": str(tmp / "webhooks.toml"),
        "DATABASE_URL": f"sqlite:///{tmp / 'wh.db'}",
        "WEBHOOKS_ADMIN_PASSWORD": ADMIN_PASSWORD,
    }
    migrated(env["DATABASE_URL"])
    app = create_app(env)
    http = make_server("127.0.0.1", free_port(), app, threaded=True)
    serve_in_thread(http)
    yield f"http://127.0.0.1:{http.server_port}", env
    http.shutdown()


def admin(base: str, path: str) -> Any:
    response = requests.get(f"{base}/admin/api/{path}", auth=("admin", ADMIN_PASSWORD), timeout=5)
    assert response.status_code == 200, response.text
    return response.json()


def events_of(base: str, endpoint: str) -> list[dict[str, Any]]:
    return admin(base, f"events?provider={endpoint}&limit=1000")["events"]  # type: ignore[no-any-return]


def sign(env: dict[str, str], kind: str, body: bytes, url: str, secret_index: int = 0) -> tuple[bytes, dict[str, str]]:
    endpoint = load(env).endpoints[kind]
    provider = providers.get(kind)
    return provider.sign(endpoint, body, now=datetime.now(UTC).timestamp(), secret_index=secret_index, url=url)


@pytest.mark.parametrize("kind", list(SENT))
def test_webhooks_send_is_stored_and_processed(server: tuple[str, dict[str, str]], kind: str) -> None:
    base, env = server
    before = {e["event_id"] for e in events_of(base, kind)}
    secret_index = 1 if kind not in ("adyen", "sendgrid", "paypal", "sns", "plaid") else 0
    result = CliRunner().invoke(
        main,
        [
            "send",
            kind,
            str(PAYLOADS / SENT[kind]),
            "--url",
            f"{base}/webhooks/{kind}",
            "--secret-index",
            str(secret_index),
        ],
        env=env,
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1].startswith("200 ")

    def settled() -> list[dict[str, Any]] | None:
        new = [e for e in events_of(base, kind) if e["event_id"] not in before]
        return new if new and all(e["status"] in ("processed", "ignored") for e in new) else None

    new = wait_until(settled)
    expected = (
        len(json.loads((PAYLOADS / SENT[kind]).read_text())) if kind == "sendgrid" else 2 if kind == "adyen" else 1
    )
    if kind == "gocardless":  # a batch: one event per element of ``events``
        expected = len(json.loads((PAYLOADS / SENT[kind]).read_text())["events"])
    assert len(new) == expected
    detail = admin(base, f"events/{kind}/{new[0]['event_id']}")
    # Which secret matched is recorded (none for SNS: Amazon signs, the endpoint holds no secret).
    assert detail["secret_index"] == (None if kind == "sns" else secret_index)


@pytest.mark.parametrize("kind", RAW_BODY_KINDS)
def test_tampered_body_is_refused_and_not_stored(server: tuple[str, dict[str, str]], kind: str) -> None:
    base, env = server
    url = f"{base}/webhooks/{kind}"
    raw = (PAYLOADS / SENT[kind]).read_bytes()
    post_url = providers.get(kind).post_url(url, raw)
    body, headers = sign(env, kind, raw, post_url)
    before = len(events_of(base, kind))
    tampered = body.replace(b"e", b"E", 1)
    unsigned_body = body
    if kind in BODY_SIGNED:
        signed_field, changed, name = BODY_SIGNED[kind]
        tampered = body.replace(signed_field.encode(), changed.encode())
        unsigned_body = urlencode({k: v[0] for k, v in parse_qs(body.decode()).items() if k != name}).encode()
        assert tampered != body and unsigned_body != body
    response = requests.post(post_url, data=tampered, headers=headers, timeout=5)
    refused = REFUSED_STATUS.get(kind, 400)
    assert response.status_code in (refused, 401), response.text
    assert response.json()["error"] == "signature_mismatch"
    unsigned = {k: v for k, v in headers.items() if k not in SIGNATURE_HEADERS[kind]}
    response = requests.post(post_url, data=unsigned_body, headers=unsigned, timeout=5)
    assert (response.status_code, response.json()["error"]) == (refused, "missing_signature")
    assert len(events_of(base, kind)) == before
    reasons = admin(base, "rejections")["counts"][kind]
    assert reasons["signature_mismatch"] >= 1 and reasons["missing_signature"] >= 1


def test_twilio_behind_a_proxy_verifies_against_the_public_url(server: tuple[str, dict[str, str]]) -> None:
    base, env = server
    body = b"MessageSid=SM1&MessageStatus=delivered&To=%2B15558675310&From=%2B15017122661&AccountSid=AC1"
    local = f"{base}/webhooks/twilio?tenant=7"
    _, headers = sign(env, "twilio", body, local)  # signed for https://hooks.example.com/…?tenant=7
    assert requests.post(local, data=body, headers=headers, timeout=5).status_code == 200
    endpoint = load(env).endpoints["twilio"]
    local_only = providers.get("twilio").sign(
        endpoint.__class__(**{**endpoint.__dict__, "options": {}}), body, now=0, secret_index=1, url=local
    )[1]
    response = requests.post(local, data=body, headers=local_only, timeout=5)
    assert (response.status_code, response.json()["error"]) == (400, "url_mismatch")


def test_slack_url_verification_is_answered_and_not_stored(server: tuple[str, dict[str, str]]) -> None:
    base, env = server
    raw = (PAYLOADS / "slack/url_verification__challenge.json").read_bytes()
    body, headers = sign(env, "slack", raw, "")
    before = len(events_of(base, "slack"))
    response = requests.post(f"{base}/webhooks/slack", data=body, headers=headers, timeout=5)
    assert response.json() == {"challenge": json.loads(raw)["challenge"]}
    assert len(events_of(base, "slack")) == before


def test_github_ping_is_stored_and_ignored(server: tuple[str, dict[str, str]]) -> None:
    base, env = server
    raw = (PAYLOADS / "github/ping__repository.json").read_bytes()
    body, headers = sign(env, "github", raw, "")
    assert headers["X-GitHub-Event"] == "ping"
    assert requests.post(f"{base}/webhooks/github", data=body, headers=headers, timeout=5).status_code == 200
    wait_until(lambda: admin(base, f"events/github/{headers['X-GitHub-Delivery']}")["status"] == "ignored")


def test_send_reports_an_unknown_endpoint(server: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    _, env = server
    result = CliRunner().invoke(main, ["send", "nope", str(PAYLOADS / SENT["stripe"])], env=env)
    assert result.exit_code != 0 and "no endpoint 'nope'" in result.output
