"""Hostile senders II: junk is refused by the cheapest check first, and caps bound what a sender
can make the verifier do (counted calls, never timed); junk certificate URLs never make a genuine
PayPal delivery fail."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from flask import Flask

from tests.conftest import base_config, make_app, rows
from tests.support.paypal_cert import KEY_PEM, certificate
from tests.support.servers import serve_in_thread
from webhooks import providers
from webhooks.errors import UnavailableError, VerificationError
from webhooks.providers import paypal_certs, sendgrid, standard, stripe, twilio
from webhooks.providers.base import MAX_SIGNATURES, Endpoint, Request
from webhooks.providers.paypal import PayPal
from webhooks.providers.paypal_certs import CertLoader

NOW = 1_700_000_000
SEED = bytes(range(32))  # PROVIDERS.md SW4
PUBLIC = "whpk_A6EHv/POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg="
HMAC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
JUNK_V1A = "v1a," + base64.b64encode(bytes(64)).decode()


class Counting:
    """An Ed25519 public key that counts its ``verify`` calls."""

    calls = 0

    def __init__(self, key: Any) -> None:
        self.key = key

    def verify(self, signature: bytes, data: bytes) -> None:
        Counting.calls += 1
        self.key.verify(signature, data)


@pytest.fixture
def ed25519_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[Counting]]:
    real = standard._public_key
    Counting.calls = 0
    monkeypatch.setattr(standard, "_public_key", lambda secret: Counting(real(secret)))
    yield Counting


def v1a_signed(body: bytes, ts: int, msg_id: str = "msg_hostile") -> tuple[str, dict[str, str]]:
    """The genuine v1a entry and headers for ``body`` (signed with SW4's private key)."""
    sig = Ed25519PrivateKey.from_private_bytes(SEED).sign(f"{msg_id}.{ts}.".encode() + body)
    entry = "v1a," + base64.b64encode(sig).decode()
    return entry, {"webhook-id": msg_id, "webhook-timestamp": str(ts), "webhook-signature": entry}


STD = Endpoint("std", "standard", (HMAC_SECRET, PUBLIC, PUBLIC))


def refused(provider: str, req: Request, endpoint: Endpoint, reason: str) -> None:
    with pytest.raises(VerificationError) as exc:
        providers.get(provider).verify(req, endpoint, now=NOW)
    assert exc.value.reason == reason


# -- finding 6: Standard Webhooks (and the other list-of-signatures kinds) ---------------------------


def test_a_stale_v1a_flood_is_refused_without_any_ed25519_verify(ed25519_calls: type[Counting]) -> None:
    body = b'{"type":"ping"}'
    _, headers = v1a_signed(body, NOW - 301)
    headers["webhook-signature"] = " ".join([JUNK_V1A] * MAX_SIGNATURES)
    refused("standard", Request(headers, body), STD, "timestamp_out_of_tolerance")
    assert ed25519_calls.calls == 0


def test_more_signature_entries_than_the_cap_are_refused_without_crypto(ed25519_calls: type[Counting]) -> None:
    body = b'{"type":"ping"}'
    entry, headers = v1a_signed(body, NOW)
    headers["webhook-signature"] = " ".join([JUNK_V1A] * MAX_SIGNATURES + [entry])  # genuine, but 17th
    refused("standard", Request(headers, body), STD, "too_many_signatures")
    assert ed25519_calls.calls == 0


def test_a_genuine_entry_last_of_the_cap_still_verifies(ed25519_calls: type[Counting]) -> None:
    body = b'{"type":"ping"}'
    entry, headers = v1a_signed(body, NOW)
    headers["webhook-signature"] = " ".join([JUNK_V1A] * (MAX_SIGNATURES - 1) + [entry])
    result = providers.get("standard").verify(Request(headers, body), STD, now=NOW)
    assert result.scheme == "standard-v1a" and result.events[0].secret_index == 1
    assert ed25519_calls.calls == MAX_SIGNATURES


def test_an_overlong_id_is_refused_before_crypto(ed25519_calls: type[Counting]) -> None:
    body = b'{"type":"ping"}'
    _, headers = v1a_signed(body, NOW, msg_id="m" * 256)
    refused("standard", Request(headers, body), STD, "malformed_payload")
    assert ed25519_calls.calls == 0


def test_stripe_caps_its_v1_list_and_checks_the_time_before_the_hmac(monkeypatch: pytest.MonkeyPatch) -> None:
    body, secret = b'{"id":"evt_1","type":"x","created":1}', "whsec_hostile"
    endpoint = Endpoint("stripe", "stripe", (secret,))
    _, headers = providers.get("stripe").sign(endpoint, body, now=NOW)
    genuine = headers["Stripe-Signature"]  # t=…,v1=…
    junk = ",".join(["v1=" + "00" * 32] * MAX_SIGNATURES)
    refused("stripe", Request({"stripe-signature": f"{genuine},{junk}"}, body), endpoint, "too_many_signatures")
    stale = providers.get("stripe").sign(endpoint, body, now=NOW - 301)[1]["Stripe-Signature"]
    calls: list[bytes] = []
    real = stripe.hmac_digest
    monkeypatch.setattr(stripe, "hmac_digest", lambda key, msg: calls.append(msg) or real(key, msg))
    refused("stripe", Request({"stripe-signature": stale}, body), endpoint, "timestamp_out_of_tolerance")
    assert calls == []
    within = genuine + "," + ",".join(["v1=" + "00" * 32] * (MAX_SIGNATURES - 3))  # t, v1, 13 more: 15 items
    assert providers.get("stripe").verify(Request({"stripe-signature": within}, body), endpoint, now=NOW).events


def test_sendgrid_refuses_an_oversized_signature_before_any_ecdsa(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sendgrid, "public_key", lambda secret: pytest.fail("an ECDSA key was used"))
    headers = {sendgrid.SIGNATURE.lower(): base64.b64encode(bytes(4096)).decode(), sendgrid.TIMESTAMP.lower(): "1"}
    endpoint = Endpoint("sg", "sendgrid", ("unused",))
    refused("sendgrid", Request(headers, b"[]"), endpoint, "malformed_signature")


# -- finding 7: Twilio's form is counted before it is parsed or sorted ------------------------------

TW = Endpoint("tw", "twilio", ("12345",), options={"public_url": "https://example.com/hook"})


def twilio_form(params: int) -> tuple[bytes, dict[str, str]]:
    body = urlencode([(f"P{n}", "x") for n in range(params)]).encode()
    _, headers = providers.get("twilio").sign(TW, body, now=NOW, url="https://example.com/hook")
    return body, {k.lower(): v for k, v in headers.items()}


@pytest.fixture
def form_parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    parsed: list[int] = []
    real = twilio.parse_form
    monkeypatch.setattr(twilio, "parse_form", lambda body: parsed.append(len(body)) or real(body))
    return parsed


def test_a_form_over_the_parameter_cap_is_refused_before_parsing(form_parses: list[int]) -> None:
    body, headers = twilio_form(twilio.MAX_PARAMETERS + 1)  # signed correctly even
    form_parses.clear()  # signing parsed it
    refused("twilio", Request(headers, body, url="https://example.com/hook"), TW, "too_many_parameters")
    assert form_parses == []
    body, headers = twilio_form(twilio.MAX_PARAMETERS)
    assert providers.get("twilio").verify(Request(headers, body, url="https://example.com/hook"), TW, now=NOW)


def test_a_signature_of_the_wrong_size_is_refused_before_parsing(form_parses: list[int]) -> None:
    body, headers = twilio_form(10)
    form_parses.clear()  # signing parsed it
    for size in (0, 16, 32, 64):  # SHA-1 is 20 bytes; 32 only under the SHA-256 setting
        headers["x-twilio-signature"] = base64.b64encode(bytes(size)).decode()
        with pytest.raises(VerificationError) as exc:
            providers.get("twilio").verify(Request(headers, body, url="https://example.com/hook"), TW, now=NOW)
        assert exc.value.reason in ("malformed_signature", "missing_signature")
    assert form_parses == []


# -- the same refusals through the receiver ---------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def hostile_app(request: pytest.FixtureRequest) -> Flask:
    """The caps' endpoints on the embedded default and on PostgreSQL + Redis."""
    endpoints = {
        "standard": {"provider": "standard", "secrets": [PUBLIC]},
        "twilio": {"provider": "twilio", "secrets": ["12345"], "public_url": "https://example.com/hook"},
    }
    if request.param == "sqlite":
        return make_app(base_config(request.getfixturevalue("sqlite_url"), ENDPOINTS=endpoints))
    return make_app(
        base_config(
            request.getfixturevalue("pg_url"), REDIS_URL=request.getfixturevalue("redis_url"), ENDPOINTS=endpoints
        )
    )


def test_the_receiver_answers_the_caps_with_their_reasons(hostile_app: Flask) -> None:
    client, ts = hostile_app.test_client(), int(time.time())
    body = b'{"type":"ping"}'
    entry, headers = v1a_signed(body, ts)
    headers["webhook-signature"] = " ".join([JUNK_V1A] * 200 + [entry])
    answer = client.post("/webhooks/standard", data=body, headers=headers)
    assert (answer.status_code, answer.get_json()) == (400, {"error": "too_many_signatures"})
    form = b"&".join([b"a=1"] * 150_000)  # 600 KB, under the body limit
    answer = client.post(
        "/webhooks/twilio",
        data=form,
        headers={"X-Twilio-Signature": "A" * 27 + "=", "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert (answer.status_code, answer.get_json()) == (400, {"error": "too_many_parameters"})
    assert rows(hostile_app, "SELECT count(*) FROM events")[0][0] == 0
    # Both are quarantined for the operator to see, without the junk body no re-verify could pass.
    assert rows(hostile_app, "SELECT reason, length(body) FROM rejections ORDER BY id") == [
        ("too_many_signatures", 0),
        ("too_many_parameters", 0),
    ]


# -- finding 8: junk PayPal certificate URLs never make a genuine delivery fail ---------------------

CERTS = "https://api.sandbox.paypal.com/v1/notifications/certs/"


@pytest.fixture
def paypal_fake() -> Iterator[tuple[str, list[str], bytes]]:
    """A local stand-in for PayPal's certificate host: the certificate at CERT-genuine, 404 elsewhere."""
    pem, hits = certificate(start=time.time() - 86400), []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            if self.path.endswith("/CERT-genuine"):
                self.send_response(200)
                self.send_header("Content-Length", str(len(pem)))
                self.end_headers()
                self.wfile.write(pem)
            else:
                self.send_error(404)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = serve_in_thread(server)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits, pem
    finally:
        server.shutdown()
        thread.join()


def test_junk_certificate_urls_never_make_a_genuine_delivery_fail(
    sqlite_url: str, paypal_fake: tuple[str, list[str], bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, hits, _ = paypal_fake
    loader = CertLoader(check_chain=False)  # the default budget; the real fetch path, served locally
    loader.fetch = lambda url: loader._fetch(base + urlsplit(url).path)
    monkeypatch.setattr(paypal_certs, "default_loader", loader)
    app = make_app(
        base_config(
            sqlite_url,
            ENDPOINTS={
                "paypal": {
                    "provider": "paypal",
                    "secrets": [],
                    "webhook_id": "WH-1T2Y3",
                    "signing_key": KEY_PEM,
                    "cert_url": CERTS + "CERT-genuine",
                }
            },
        )
    )
    endpoint, client = app.extensions["webhooks"].settings.endpoints["paypal"], app.test_client()
    body = b'{"id":"WH-hostile-1","event_type":"PAYMENT.CAPTURE.COMPLETED"}'
    answers = []
    # Fresh times, PayPal hosts, RSA-sized junk signatures: each new URL would cost a fetch. From
    # 11 addresses, 12 new URLs each: more than the overall budget of 120 fetches a minute.
    for n in range(132):
        _, headers = providers.get("paypal").sign(endpoint, body, now=time.time())
        headers |= {"PAYPAL-CERT-URL": f"{CERTS}CERT-junk-{n}", "PAYPAL-TRANSMISSION-SIG": "A" * 344}
        for _ in range(2):  # a repeated junk URL is answered from memory
            answer = client.post(
                "/webhooks/paypal", data=body, headers=headers, environ_overrides={"REMOTE_ADDR": f"203.0.113.{n % 11}"}
            )
            answers.append((answer.status_code, answer.get_json()["error"]))
    assert answers.count((400, "signature_mismatch")) == 2 * 110  # 10 fetches a sender, each answered twice
    assert answers.count((503, "unavailable")) == 2 * 22  # the rest: rate-limited, never fetched
    assert len(hits) == 110
    # PayPal's own address has its budget, and the overall one has room left: the genuine passes.
    _, headers = providers.get("paypal").sign(endpoint, body, now=time.time())
    answer = client.post(
        "/webhooks/paypal", data=body, headers=headers, environ_overrides={"REMOTE_ADDR": "173.0.80.1"}
    )
    assert answer.status_code == 200, answer.get_data()
    assert len(hits) == 111 and hits[-1].endswith("/CERT-genuine")
    assert rows(app, "SELECT event_id FROM events") == [("WH-hostile-1",)]


def test_fetches_stay_bounded_and_one_url_is_fetched_once_at_a_time() -> None:
    started, release, fetched = threading.Event(), threading.Event(), []

    def fetch(url: str) -> bytes:
        fetched.append(url)
        started.set()
        release.wait(10)
        raise UnavailableError("PayPal certificate host unreachable")

    loader = CertLoader(check_chain=False, fetch=fetch, max_fetches=3)
    outcomes: list[type[BaseException]] = []

    def ask() -> None:
        try:
            loader(CERTS + "CERT-slow")
        except (UnavailableError, VerificationError) as exc:
            outcomes.append(type(exc))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    threads[0].start()
    assert started.wait(10)
    for t in threads[1:]:
        t.start()
    release.set()
    for t in threads:
        t.join(10)
    assert fetched == [CERTS + "CERT-slow"] and outcomes == [UnavailableError] * 4  # shared, one fetch
    for n in range(10):
        with pytest.raises(UnavailableError):
            loader(f"{CERTS}CERT-other-{n}")
    assert len(fetched) == 3  # the overall bound: max_fetches distinct URLs a window


def test_paypal_header_shapes_are_checked_before_any_fetch() -> None:
    never = PayPal(cert_loader=lambda url: pytest.fail(f"fetched {url}"))  # type: ignore[arg-type,return-value]
    endpoint = Endpoint(
        "pp", "paypal", (), options={"webhook_id": "WH-1", "signing_key": KEY_PEM, "cert_url": CERTS + "CERT-genuine"}
    )
    body = b'{"id":"WH-1","event_type":"X"}'
    _, headers = never.sign(endpoint, body, now=NOW)
    for change, reason in (
        ({"PAYPAL-TRANSMISSION-SIG": base64.b64encode(bytes(64)).decode()}, "malformed_signature"),
        ({"PAYPAL-TRANSMISSION-SIG": base64.b64encode(bytes(2048)).decode()}, "malformed_signature"),
        ({"PAYPAL-CERT-URL": CERTS + "CERT-1/../../x"}, "url_mismatch"),
        ({"PAYPAL-CERT-URL": CERTS + "x" * 129}, "url_mismatch"),
        ({"PAYPAL-CERT-URL": CERTS + ".."}, "url_mismatch"),
    ):
        req = Request({k.lower(): v for k, v in {**headers, **change}.items()}, body)
        with pytest.raises(VerificationError) as exc:
            never.verify(req, endpoint, now=NOW)
        assert exc.value.reason == reason, change
