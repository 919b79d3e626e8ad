"""Amazon SNS: AWS's documented string to sign and example messages, an independent signer and
verifier written from AWS's procedure as the oracle both ways over randomized messages (botocore
ships no verifier), one test per failure rule, the certificate and SubscribeURL fetched from a local
server through ``outbound`` (never AWS), and through the app: a confirmation confirmed and never
stored, an unsubscription recorded, stored once under concurrent duplicates, refusals store
nothing, a re-labelled message no second event.

AWS's procedure: https://docs.aws.amazon.com/sns/latest/dg/sns-verify-signature-of-message.html and
https://docs.aws.amazon.com/sns/latest/dg/sns-verify-signature-of-message-verify-message-signature.html;
the example messages: https://docs.aws.amazon.com/sns/latest/dg/http-subscription-confirmation-json.html,
http-notification-json.html and http-unsubscribe-confirmation-json.html (same directory).
"""

from __future__ import annotations

import base64
import json
import random
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from flask import Flask
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import base_config, make_app, rows
from tests.support.paypal_cert import KEY, KEY_PEM, NOW, certificate
from tests.support.servers import serve_in_thread
from webhooks import providers
from webhooks.errors import ConfigError, PayloadError, UnavailableError, VerificationError
from webhooks.providers import sns_certs
from webhooks.providers.base import Endpoint, Request
from webhooks.providers.sns import Sns, signed_string
from webhooks.providers.sns_certs import Confirmer, SnsCertLoader
from webhooks.providers.sns_hosts import is_sns_cert_url, is_subscribe_url

PAYLOADS = Path(__file__).parents[1] / "payloads" / "sns"
TOPIC = "arn:aws:sns:us-west-2:123456789012:MyTopic"
BOUNCES = "arn:aws:sns:us-west-2:123456789012:ses-bounces"
CERT_URL = "https://sns.us-west-2.amazonaws.com/SimpleNotificationService-f3ecfb7224c7233fe7bb5f59f96de52f.pem"
CERT = certificate("sns.amazonaws.com", start=0, days=36500)  # valid at NOW and today (the loader checks today)
OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
ORACLE_EVENTS = 250
CONFIRMED: list[str] = []
PROVIDER = Sns(cert_loader=lambda url, sender="": CERT, confirmer=CONFIRMED.append)


def endpoint(**options: object) -> Endpoint:
    values = {"topic_arns": [TOPIC, BOUNCES], "signing_key": KEY_PEM, "cert_url": CERT_URL, **options}
    return Endpoint("sns", "sns", (), options=values)


def payload(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((PAYLOADS / f"{name}.json").read_bytes())
    return data


def signed(message: dict[str, Any], ep: Endpoint | None = None, now: float = NOW) -> Request:
    """The one correct signing helper every negative case starts from."""
    body, headers = PROVIDER.sign(ep or endpoint(), json.dumps(message).encode(), now=now)
    return Request({k.lower(): v for k, v in headers.items()}, body)


def outcome(request: Request, ep: Endpoint | None = None, provider: Sns = PROVIDER) -> str:
    try:
        provider.verify(request, ep or endpoint(), now=NOW)
    except VerificationError as exc:
        return str(exc.reason)
    return "ok"


# -- AWS's documented string to sign, written out from the procedure -----------------------------


def aws_string_to_sign(message: dict[str, Any]) -> bytes:
    """AWS's procedure, independently: each of the type's fields in byte order of their names,
    "name\\nvalue\\n", Subject only when present (the documentation's step 1 and its two lists)."""
    if message["Type"] == "Notification":
        names = ["Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"]
    else:
        names = ["Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"]
    return b"".join(f"{n}\n{message[n]}\n".encode() for n in sorted(names) if message.get(n) is not None)


def aws_sign(message: dict[str, Any], key: rsa.RSAPrivateKey = KEY) -> dict[str, Any]:
    digest = hashes.SHA1() if message["SignatureVersion"] == "1" else hashes.SHA256()
    signature = key.sign(aws_string_to_sign(message), padding.PKCS1v15(), digest)
    return {**message, "Signature": base64.b64encode(signature).decode()}


def aws_verifies(message: dict[str, Any]) -> bool:
    digest = hashes.SHA1() if message["SignatureVersion"] == "1" else hashes.SHA256()
    public = x509.load_pem_x509_certificate(CERT).public_key()
    assert isinstance(public, rsa.RSAPublicKey)
    try:
        public.verify(base64.b64decode(message["Signature"]), aws_string_to_sign(message), padding.PKCS1v15(), digest)
    except InvalidSignature:
        return False
    return True


def test_the_documented_string_to_sign_of_the_docs_notification() -> None:
    """The docs' Notification example, its string to sign as the procedure lays it out."""
    expected = (
        "Message\nHello world!\n"
        "MessageId\n22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324\n"
        "Subject\nMy First Message\n"
        "Timestamp\n2012-05-02T00:54:06.655Z\n"
        f"TopicArn\n{TOPIC}\n"
        "Type\nNotification\n"
    ).encode()
    assert signed_string(payload("Notification__docs_example")) == expected


def test_the_documented_string_to_sign_of_the_docs_confirmations() -> None:
    for name in ("SubscriptionConfirmation__docs_example", "UnsubscribeConfirmation__docs_example"):
        message = payload(name)
        text = signed_string(message).decode()
        assert text.startswith("Message\nYou have chosen to ")
        assert f"\nSubscribeURL\n{message['SubscribeURL']}\n" in text and f"\nToken\n{message['Token']}\n" in text
        assert text.endswith(f"TopicArn\n{TOPIC}\nType\n{message['Type']}\n")
        assert signed_string(message) == aws_string_to_sign(message)


@pytest.mark.parametrize("name", sorted(p.stem for p in PAYLOADS.glob("*.json")))
def test_every_payload_file_signs_and_verifies_both_versions(name: str) -> None:
    message = payload(name)
    for version in ("1", "2"):
        request = signed({**message, "SignatureVersion": version})
        result = PROVIDER.verify(request, endpoint(), now=NOW)
        assert result.scheme == f"sns-v{version}"
        if message["Type"] == "SubscriptionConfirmation":
            assert result.events == [] and result.reply is not None
        else:
            (event,) = result.events
            assert (event.event_id, event.event_type) == (message["MessageId"], message["Type"])
            assert event.reference == message["TopicArn"] and event.signed_at == NOW
            assert result.replay_key is None  # MessageId and Timestamp are signed
            assert PROVIDER.extract(event.event_type, json.loads(request.body)) is None  # no object, no version


def test_send_publishes_any_other_body_as_the_message_of_a_notification() -> None:
    raw = b'{"id": "evt_1", "type": "invoice.paid"}'
    request = signed_raw(raw)
    message = json.loads(request.body)
    assert (message["Type"], message["TopicArn"], message["Message"]) == ("Notification", TOPIC, raw.decode())
    assert message["MessageId"] == json.loads(signed_raw(raw).body)["MessageId"]  # the same body: the same id
    assert PROVIDER.verify(request, endpoint(), now=NOW).events[0].event_id == message["MessageId"]
    assert request.headers["x-amz-sns-message-type"] == "Notification"


def signed_raw(raw: bytes) -> Request:
    body, headers = PROVIDER.sign(endpoint(), raw, now=NOW)
    return Request({k.lower(): v for k, v in headers.items()}, body)


# -- the oracle: AWS's procedure, both ways -------------------------------------------------------


def random_message(rng: random.Random) -> dict[str, Any]:
    alphabet = 'abcXYZ 019\n\t"\\/{}é€😀'
    kind = rng.choice(["Notification", "Notification", "SubscriptionConfirmation", "UnsubscribeConfirmation"])
    token = "".join(rng.choice("0123456789abcdef") for _ in range(rng.randint(16, 256)))
    message: dict[str, Any] = {
        "Type": kind,
        "MessageId": f"{rng.getrandbits(128):032x}",
        "TopicArn": rng.choice([TOPIC, BOUNCES]),
        "Message": "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 300))),
        "Timestamp": "2023-11-14T22:13:20.000Z",
        "SignatureVersion": rng.choice(["1", "2"]),
        "SigningCertURL": CERT_URL,
    }
    if kind == "Notification":
        subject = rng.choice([None, "absent", "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 100)))])
        if subject != "absent":
            message["Subject"] = subject
    else:
        message["Token"] = token
        message["SubscribeURL"] = (
            f"https://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription&TopicArn={message['TopicArn']}&Token={token}"
        )
    return message


def test_oracle_both_ways_over_randomized_messages() -> None:
    rng = random.Random(20261202)
    disagreements = 0
    for _ in range(ORACLE_EVENTS):
        message = random_message(rng)
        ours = json.loads(signed(message).body)  # ours signs → AWS's procedure accepts
        disagreements += not aws_verifies(ours)
        theirs = aws_sign(message)  # AWS's procedure signs → ours accepts
        disagreements += outcome(Request({}, json.dumps(theirs).encode())) != "ok"
        forged = aws_sign(message, OTHER_KEY)  # another key: both refuse
        disagreements += aws_verifies(forged) or outcome(Request({}, json.dumps(forged).encode())) == "ok"
        flipped = {**theirs, "MessageId": theirs["MessageId"] + "0"}  # a signed field changed: both refuse
        disagreements += aws_verifies(flipped) or outcome(Request({}, json.dumps(flipped).encode())) == "ok"
    assert disagreements == 0


# -- failures, one rule each ----------------------------------------------------------------------

NOTE = payload("Notification__docs_example")
BODY = signed(NOTE).body


def resent(**changes: Any) -> Request:
    """The genuine signed message with fields changed after signing (None: removed)."""
    message = {**json.loads(BODY), **changes}
    return Request({}, json.dumps({k: v for k, v in message.items() if v is not None}).encode())


@pytest.mark.parametrize(
    ("request_", "reason"),
    [
        (resent(Message="Hello world?"), "signature_mismatch"),
        (resent(Subject="Another subject"), "signature_mismatch"),
        (resent(Subject=None), "signature_mismatch"),
        (resent(MessageId="00000000-0000-0000-0000-000000000000"), "signature_mismatch"),
        (resent(SignatureVersion="2"), "signature_mismatch"),  # a SHA-1 signature relabelled SHA-256
        (resent(SignatureVersion="3"), "malformed_signature"),
        (resent(SignatureVersion=1), "malformed_signature"),
        (resent(Signature=None), "missing_signature"),
        (resent(Signature="not base64!"), "malformed_signature"),
        (resent(Signature=base64.b64encode(b"short").decode()), "malformed_signature"),
        (resent(Timestamp="yesterday"), "malformed_signature"),
        (resent(Type="Notice"), "malformed_payload"),
        (resent(MessageId=None), "malformed_payload"),
        (resent(SigningCertURL="http://sns.us-west-2.amazonaws.com/SimpleNotificationService-x.pem"), "url_mismatch"),
        (resent(SigningCertURL="https://sns.us-west-2.amazonaws.com.evil.example/x.pem"), "url_mismatch"),
        (resent(SigningCertURL="https://sns.us-east-1.amazonaws.com/SimpleNotificationService-x.pem"), "url_mismatch"),
        (resent(SigningCertURL=CERT_URL + "?x=1"), "url_mismatch"),
        (resent(SigningCertURL="https://evil.example/SimpleNotificationService-x.pem"), "url_mismatch"),
        (resent(SigningCertURL=None), "url_mismatch"),
        (Request({}, b"Type=Notification"), "malformed_payload"),
        (Request({}, b"[]"), "malformed_payload"),
    ],
)
def test_failures(request_: Request, reason: str) -> None:
    fetched: list[str] = []
    provider = Sns(cert_loader=lambda url, sender="": fetched.append(url) or CERT, confirmer=CONFIRMED.append)
    assert outcome(request_, provider=provider) == reason
    if reason in ("url_mismatch", "malformed_signature", "missing_signature", "malformed_payload"):
        assert fetched == []  # refused before any certificate is fetched


def test_another_key_and_an_expired_certificate_are_refused() -> None:
    forged = Request({}, json.dumps(aws_sign({**NOTE, "Timestamp": "2023-11-14T22:13:20.000Z"}, OTHER_KEY)).encode())
    assert outcome(forged) == "signature_mismatch"
    expired = Sns(cert_loader=lambda url, sender="": certificate("sns.amazonaws.com", start=NOW - 10 * 86400, days=1))
    assert outcome(Request({}, BODY), provider=expired) == "signature_mismatch"


def test_a_stale_or_future_timestamp_is_refused_before_any_fetch() -> None:
    fetched: list[str] = []
    provider = Sns(cert_loader=lambda url, sender="": fetched.append(url) or CERT)
    for skew in (-301, 301, -86400):
        assert outcome(signed(NOTE, now=NOW + skew), provider=provider) == "timestamp_out_of_tolerance"
    assert fetched == []
    assert outcome(signed(NOTE, now=NOW - 299), provider=provider) == "ok"


def test_a_topic_not_configured_is_refused_before_any_fetch() -> None:
    """Any AWS account can sign messages of its own topic to this URL: only the named topics count."""
    fetched: list[str] = []
    provider = Sns(cert_loader=lambda url, sender="": fetched.append(url) or CERT)
    stranger = "arn:aws:sns:us-west-2:999999999999:MyTopic"
    assert outcome(signed({**NOTE, "TopicArn": stranger}), provider=provider) == "signature_mismatch"
    assert outcome(signed(NOTE), endpoint(topic_arns=BOUNCES), provider=provider) == "signature_mismatch"
    assert fetched == []


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"topic_arns": []},
        {"topic_arns": "MyTopic"},
        {"topic_arns": [TOPIC, "arn:aws:sqs:us-west-2:123456789012:queue"]},
        {"topic_arns": TOPIC, "certificate": "not a PEM"},
        {"topic_arns": TOPIC, "confirm": "yes"},
    ],
)
def test_topics_are_required_at_start_up(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        PROVIDER.validate(Endpoint("sns", "sns", (), options=options))


def test_a_valid_endpoint_passes_start_up() -> None:
    PROVIDER.validate(endpoint(certificate=CERT.decode()))
    PROVIDER.validate(
        Endpoint("sns", "sns", (), options={"topic_arns": "arn:aws:sns:us-gov-west-1:123456789012:a.fifo"})
    )


# -- the subscription handshake -------------------------------------------------------------------

SUBSCRIBE = payload("SubscriptionConfirmation__docs_example")


def test_a_verified_confirmation_is_confirmed_once_and_never_an_event() -> None:
    seen: list[str] = []
    provider = Sns(cert_loader=lambda url, sender="": CERT, confirmer=seen.append)
    result = provider.verify(signed(SUBSCRIBE), endpoint(), now=NOW)
    assert result.events == [] and result.reply is not None and json.loads(result.reply.body) == {"confirmed": True}
    assert seen == [SUBSCRIBE["SubscribeURL"]]
    unconfirmed = provider.verify(signed(SUBSCRIBE), endpoint(confirm=False), now=NOW)
    assert unconfirmed.events == [] and seen == [SUBSCRIBE["SubscribeURL"]]


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"Signature": "A" * 344}, "signature_mismatch"),  # an unsigned confirmation: never confirmed
        ({"SubscribeURL": "https://evil.example/?Action=ConfirmSubscription"}, "signature_mismatch"),
        ({"TopicArn": "arn:aws:sns:us-west-2:999999999999:Other"}, "signature_mismatch"),
    ],
)
def test_a_confirmation_not_verified_is_never_confirmed(changes: dict[str, str], reason: str) -> None:
    seen: list[str] = []
    provider = Sns(cert_loader=lambda url, sender="": CERT, confirmer=seen.append)
    message = {**json.loads(signed(SUBSCRIBE).body), **changes}
    assert outcome(Request({}, json.dumps(message).encode()), provider=provider) == reason
    assert seen == []


@pytest.mark.parametrize(
    "url",
    [
        "https://evil.example/?Action=ConfirmSubscription&TopicArn={topic}&Token={token}",
        "http://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription&TopicArn={topic}&Token={token}",
        "https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&TopicArn={topic}&Token={token}",
        "https://sns.us-west-2.amazonaws.com/?Action=Unsubscribe&TopicArn={topic}&Token={token}",
        "https://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription&TopicArn={topic}&Token=other",
        "https://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription&TopicArn={topic}&Token={token}&x=1",
        "https://sns.us-west-2.amazonaws.com/evil?Action=ConfirmSubscription&TopicArn={topic}&Token={token}",
        "https://u@sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription&TopicArn={topic}&Token={token}",
    ],
)
def test_a_signed_subscribe_url_off_sns_is_never_fetched(url: str) -> None:
    """SNS signs the SubscribeURL; still, only SNS's own URL for this topic and token is fetched."""
    seen: list[str] = []
    provider = Sns(cert_loader=lambda u, sender="": CERT, confirmer=seen.append)
    message = {**SUBSCRIBE, "SubscribeURL": url.format(topic=TOPIC, token=SUBSCRIBE["Token"])}
    assert outcome(signed(message), provider=provider) == "url_mismatch"
    assert seen == []


@settings(max_examples=200, deadline=None)
@given(url=st.text(max_size=120), prefix=st.sampled_from(["", "https://", "https://sns.us-west-2.amazonaws.com"]))
def test_hostile_certificate_urls_are_never_fetched(url: str, prefix: str) -> None:
    fetched: list[str] = []
    provider = Sns(cert_loader=lambda u, sender="": fetched.append(u) or CERT)
    message = {**json.loads(BODY), "SigningCertURL": prefix + url}
    try:
        provider.verify(Request({}, json.dumps(message).encode()), endpoint(), now=NOW)
    except VerificationError:
        pass
    assert all(is_sns_cert_url(u) and ".amazonaws.com/SimpleNotificationService-" in u for u in fetched)


def test_host_rules() -> None:
    assert is_sns_cert_url(CERT_URL)
    assert is_sns_cert_url("https://sns.ap-southeast-2.amazonaws.com:443/SimpleNotificationService-a_b-c.pem")
    for bad in (
        "https://sns.us-west-2.amazonaws.com/other.pem",
        "https://sns.us-west-2.amazonaws.com:8443/SimpleNotificationService-a.pem",
        "https://sns.amazonaws.com/SimpleNotificationService-a.pem",
        "https://sns.us-west-2.amazonaws.com/SimpleNotificationService-a.pem#x",
        "https://[::1/SimpleNotificationService-a.pem",
    ):
        assert not is_sns_cert_url(bad), bad
    assert is_subscribe_url(SUBSCRIBE["SubscribeURL"], TOPIC, SUBSCRIBE["Token"])
    assert not is_subscribe_url(SUBSCRIBE["SubscribeURL"], BOUNCES, SUBSCRIBE["Token"])


# -- the fetchers, against a local server through outbound (never AWS) ----------------------------


@pytest.fixture
def local() -> Iterator[tuple[str, list[str], dict[str, Any]]]:
    """A local stand-in for SNS: serves ``state["cert"]`` for a .pem, answers ``state["status"]`` to
    a confirmation; every path asked is recorded."""
    hits: list[str] = []
    state: dict[str, Any] = {"cert": CERT, "status": 200}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            body = state["cert"] if self.path.endswith(".pem") else b"<ConfirmSubscriptionResponse/>"
            self.send_response(state["status"] if not self.path.endswith(".pem") else 200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = serve_in_thread(server)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits, state
    finally:
        server.shutdown()
        thread.join()


def served(base: str, url: str) -> str:
    """An SNS URL's path and query on the local server."""
    return base + url.split(".amazonaws.com", 1)[1]


def local_loader(base: str, **kwargs: Any) -> SnsCertLoader:
    loader = SnsCertLoader(check_chain=False, **kwargs)
    loader.fetch = lambda url: loader._fetch(served(base, url))  # the SNS URL, served locally
    return loader


def local_confirmer(base: str, **kwargs: Any) -> Confirmer:
    confirmer = Confirmer(**kwargs)
    confirmer.fetch = lambda url: confirmer._fetch(served(base, url))
    return confirmer


def test_the_certificate_is_fetched_once_and_cached(local: tuple[str, list[str], dict[str, Any]]) -> None:
    base, hits, _ = local
    provider = Sns(cert_loader=local_loader(base), confirmer=CONFIRMED.append)
    for n in range(5):
        assert outcome(signed({**NOTE, "MessageId": f"m-{n}"}), provider=provider) == "ok"
    assert hits == ["/SimpleNotificationService-f3ecfb7224c7233fe7bb5f59f96de52f.pem"]


def test_a_certificate_not_snss_is_refused_and_remembered(local: tuple[str, list[str], dict[str, Any]]) -> None:
    base, hits, state = local
    state["cert"] = certificate("evil.example.com", start=0, days=36500)
    loader = local_loader(base)
    for _ in range(3):
        with pytest.raises(VerificationError, match="message verification certificate"):
            loader(CERT_URL)
    assert len(hits) == 1
    with pytest.raises(VerificationError, match="not a SNS certificate URL"):
        loader("https://evil.example/SimpleNotificationService-x.pem")
    assert len(hits) == 1


def test_junk_certificate_urls_never_starve_a_genuine_one(local: tuple[str, list[str], dict[str, Any]]) -> None:
    """One sender's junk spends its own budget: a genuine certificate is still fetched for another."""
    base, hits, _ = local
    loader = local_loader(base, per_sender=3, max_fetches=100)
    junk = "https://sns.us-west-2.amazonaws.com/SimpleNotificationService-junk{}.pem"
    for n in range(3):
        loader(junk.format(n), "203.0.113.9")
    with pytest.raises(UnavailableError, match="rate-limited"):
        loader(junk.format(99), "203.0.113.9")
    assert loader(CERT_URL, "54.240.0.1") == CERT
    assert len(hits) == 4


def test_the_confirmation_is_fetched_once(local: tuple[str, list[str], dict[str, Any]]) -> None:
    base, hits, _ = local
    provider = Sns(cert_loader=lambda url, sender="": CERT, confirmer=local_confirmer(base))
    request = signed(SUBSCRIBE)
    with ThreadPoolExecutor(5) as pool:  # concurrent copies share the one confirmation
        assert list(pool.map(lambda _: outcome(request, provider=provider), range(10))) == ["ok"] * 10
    assert hits == [SUBSCRIBE["SubscribeURL"].split(".amazonaws.com", 1)[1]]


def test_confirmation_failures(local: tuple[str, list[str], dict[str, Any]]) -> None:
    base, hits, state = local
    url = SUBSCRIBE["SubscribeURL"]
    state["status"] = 503
    with pytest.raises(UnavailableError):
        local_confirmer(base)(url)
    state["status"] = 403  # an expired token
    with pytest.raises(PayloadError):
        local_confirmer(base)(url)
    with pytest.raises(VerificationError, match="not an SNS SubscribeURL"):
        local_confirmer(base)("https://evil.example/?Action=ConfirmSubscription")
    assert len(hits) == 2
    limited = local_confirmer(base, max_calls=1)
    state["status"] = 200
    limited(url)
    with pytest.raises(UnavailableError, match="rate-limited"):
        limited(url.replace("Token=", "Token=1"))
    with pytest.raises(UnavailableError, match="unreachable"):
        Confirmer(timeout=2)._fetch("http://127.0.0.1:9/")  # nothing listens there


# -- through the app: certificates and confirmations from the local server -----------------------


@pytest.fixture
def sns_app(
    sqlite_url: str, local: tuple[str, list[str], dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Flask, list[str]]]:
    base, hits, _ = local
    monkeypatch.setattr(sns_certs, "default_loader", local_loader(base))
    monkeypatch.setattr(sns_certs, "default_confirmer", local_confirmer(base))
    options = {"topic_arns": [TOPIC, BOUNCES], "signing_key": KEY_PEM, "cert_url": CERT_URL}
    yield make_app(base_config(sqlite_url, ENDPOINTS={"sns": {"provider": "sns", **options}})), hits


def app_signed(app: Flask, message: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    ep = app.extensions["webhooks"].settings.endpoints["sns"]
    return providers.get("sns").sign(ep, json.dumps(message).encode(), now=time.time())


def post(app: Flask, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    response = app.test_client().post("/webhooks/sns", data=body, headers=headers)
    return response.status_code, response.get_json()


def stored(app: Flask) -> list[tuple[str, str]]:
    return [tuple(r) for r in rows(app, "SELECT event_id, event_type FROM events WHERE endpoint = 'sns'")]


def test_subscription_confirmed_never_stored_and_unsubscription_recorded(sns_app: tuple[Flask, list[str]]) -> None:
    app, hits = sns_app
    body, headers = app_signed(app, SUBSCRIBE)
    tampered = json.dumps({**json.loads(body), "Token": "0" + SUBSCRIBE["Token"]}).encode()
    assert post(app, tampered, headers) == (400, {"error": "signature_mismatch"})
    assert not [h for h in hits if "ConfirmSubscription" in h]  # never confirmed without a valid signature
    assert post(app, body, headers) == (200, {"confirmed": True})
    assert stored(app) == []
    assert [h for h in hits if "ConfirmSubscription" in h] == [SUBSCRIBE["SubscribeURL"].split(".com", 1)[1]]
    unsubscribe = payload("UnsubscribeConfirmation__docs_example")
    assert post(app, *app_signed(app, unsubscribe))[0] == 200
    assert stored(app) == [(unsubscribe["MessageId"], "UnsubscribeConfirmation")]
    assert len([h for h in hits if "ConfirmSubscription" in h]) == 1  # an unsubscription is recorded, not confirmed


def test_ten_concurrent_duplicates_are_stored_once(sns_app: tuple[Flask, list[str]]) -> None:
    app, hits = sns_app
    body, headers = app_signed(app, NOTE)
    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda _: post(app, body, headers)[0], range(10)))
    assert answers == [200] * 10
    assert stored(app) == [(NOTE["MessageId"], "Notification")]
    assert len([h for h in hits if h.endswith(".pem")]) == 1  # one certificate fetch for all ten


def test_refusals_store_nothing_and_name_their_reason(sns_app: tuple[Flask, list[str]]) -> None:
    app, hits = sns_app
    body, headers = app_signed(app, NOTE)
    message = json.loads(body)
    tampered = json.dumps({**message, "Message": "Hello world?"}).encode()
    assert post(app, tampered, headers) == (400, {"error": "signature_mismatch"})
    forged = json.dumps(aws_sign({**message}, OTHER_KEY)).encode()
    assert post(app, forged, headers) == (400, {"error": "signature_mismatch"})
    stale = json.dumps(aws_sign({**message, "Timestamp": "2023-11-14T22:13:20.000Z"})).encode()
    assert post(app, stale, headers) == (400, {"error": "timestamp_out_of_tolerance"})
    unsigned = json.dumps({k: v for k, v in message.items() if k != "Signature"}).encode()
    assert post(app, unsigned, headers) == (400, {"error": "missing_signature"})
    elsewhere = json.dumps({**message, "SigningCertURL": "https://evil.example/SimpleNotificationService-x.pem"})
    assert post(app, elsewhere.encode(), headers) == (400, {"error": "url_mismatch"})
    assert stored(app) == []
    assert not [h for h in hits if "evil" in h]


def test_a_relabelled_message_is_no_second_event(sns_app: tuple[Flask, list[str]]) -> None:
    """What the signature does not cover: the x-amz-sns-* headers, UnsubscribeURL, the field order."""
    app, _ = sns_app
    body, headers = app_signed(app, NOTE)
    assert post(app, body, headers)[0] == 200
    message = json.loads(body)
    relabels = [
        (body, headers | {"x-amz-sns-message-id": "relabelled", "x-amz-sns-message-type": "UnsubscribeConfirmation"}),
        (json.dumps({**message, "UnsubscribeURL": "https://example.com/"}).encode(), headers),
        (json.dumps(dict(reversed(list(message.items())))).encode(), headers),
    ]
    for relabelled, relabel_headers in relabels:
        assert post(app, relabelled, relabel_headers)[0] == 200
    assert stored(app) == [(NOTE["MessageId"], "Notification")]
