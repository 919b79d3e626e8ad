"""PayPal: round trips with a test certificate, an independent signer, certificate rules, failures."""

from __future__ import annotations

import base64
import json
import zlib
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

from tests.support.crc32 import crc_twin
from tests.support.paypal_cert import CERT, KEY, KEY_PEM, certificate
from tests.support.servers import serve_in_thread
from webhooks.errors import ConfigError, UnavailableError, VerificationError
from webhooks.providers.base import Endpoint, Request, replay_key
from webhooks.providers.paypal import PayPal
from webhooks.providers.paypal_certs import CertLoader

PAYLOADS = Path(__file__).parents[1] / "payloads" / "paypal"
NOW = 1_700_000_000
CERT_URL = "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-a5cafa77"


LOADED: list[str] = []


def loader(url: str) -> bytes:
    LOADED.append(url)
    return CERT


PROVIDER = PayPal(cert_loader=loader)


def endpoint(webhook_id: str | list[str] = "9XL90610J3647323C", **options: object) -> Endpoint:
    return Endpoint("pp", "paypal", (), options={"webhook_id": webhook_id, "signing_key": KEY_PEM, **options})


def signed(body: bytes, *, webhook_id: str = "9XL90610J3647323C", **extra: str) -> Request:
    """The one correct signing helper every negative case starts from."""
    _, headers = PROVIDER.sign(endpoint(webhook_id, cert_url=CERT_URL), body, now=NOW)
    return Request({k.lower(): v for k, v in {**headers, **extra}.items() if v}, body)


def test_independent_signature_verifies_with_fetched_certificate() -> None:
    body = (PAYLOADS / "payment.sale.completed__sandbox.json").read_bytes()
    transmission_id, time = "d938e770-8046-11e6-8103-6b62a8a99ac4", "2023-11-14T22:13:20Z"  # = NOW
    message = f"{transmission_id}|{time}|9XL90610J3647323C|{zlib.crc32(body) & 0xFFFFFFFF}".encode()
    signature = base64.b64encode(KEY.sign(message, padding.PKCS1v15(), hashes.SHA256())).decode()
    headers = {
        "paypal-transmission-id": transmission_id,
        "paypal-transmission-time": time,
        "paypal-transmission-sig": signature,
        "paypal-cert-url": CERT_URL,
        "paypal-auth-algo": "SHA256withRSA",
    }
    LOADED.clear()
    result = PROVIDER.verify(Request(headers, body), endpoint(), now=NOW)
    assert LOADED == [CERT_URL]
    assert [(e.event_id, e.event_type, e.secret_index, e.signed_at) for e in result.events] == [
        ("WH-9UG43882HX7271132-6E0871324L7949614", "PAYMENT.SALE.COMPLETED", 0, NOW)
    ]
    assert result.replay_key == replay_key("paypal", transmission_id)


@pytest.mark.parametrize(
    ("name", "ref"),
    [
        ("payment.capture.completed__basic.json", ("capture", "27M47624FP291604U", 1550180998000)),
        ("payment.sale.completed__sandbox.json", ("sale", "80F85758S3080410K", 1474495206000)),
    ],
)
def test_payload_files_and_extract(name: str, ref: tuple[str, str, int]) -> None:
    body = (PAYLOADS / name).read_bytes()
    event = PROVIDER.verify(signed(body), endpoint(), now=NOW).events[0]
    assert event.event_type == name.split("__")[0].upper()
    found = PROVIDER.extract(event.event_type, PROVIDER.event_data(body, None))
    assert found is not None and (found.type, found.id, found.version) == ref


def test_pinned_certificate_needs_no_loader(tmp_path: Path) -> None:
    body = (PAYLOADS / "payment.capture.completed__basic.json").read_bytes()
    offline = PayPal(cert_loader=lambda url: pytest.fail("fetched"))  # type: ignore[arg-type,return-value]
    offline.verify(signed(body), endpoint(certificate=CERT.decode()), now=NOW)
    (tmp_path / "paypal.pem").write_bytes(CERT)
    offline.verify(signed(body), endpoint(cert_file=str(tmp_path / "paypal.pem")), now=NOW)


def test_rotation_across_webhook_ids() -> None:
    body = (PAYLOADS / "payment.capture.completed__basic.json").read_bytes()
    for index, webhook_id in enumerate(("OLD0000000000000A", "NEW0000000000000B")):
        req = signed(body, webhook_id=webhook_id)
        event = PROVIDER.verify(req, endpoint(["OLD0000000000000A", "NEW0000000000000B"]), now=NOW).events[0]
        assert event.secret_index == index


BODY = (PAYLOADS / "payment.capture.completed__basic.json").read_bytes()


@pytest.mark.parametrize(
    ("req", "reason"),
    [
        *[
            (signed(BODY, **{f"PAYPAL-{h}": ""}), "missing_signature")
            for h in ("TRANSMISSION-ID", "TRANSMISSION-TIME", "TRANSMISSION-SIG", "CERT-URL", "AUTH-ALGO")
        ],
        (signed(BODY, **{"PAYPAL-AUTH-ALGO": "SHA1withRSA"}), "malformed_signature"),
        (signed(BODY, **{"PAYPAL-TRANSMISSION-SIG": "%%%"}), "malformed_signature"),
        (signed(BODY, **{"PAYPAL-CERT-URL": "https://evil.example.com/v1/notifications/certs/CERT-1"}), "url_mismatch"),
        (signed(BODY, **{"PAYPAL-CERT-URL": CERT_URL.replace("https:", "http:")}), "url_mismatch"),
        (
            signed(BODY, **{"PAYPAL-CERT-URL": "https://api.paypal.com.evil.example/v1/notifications/certs/C"}),
            "url_mismatch",
        ),
        (Request(signed(BODY).headers, BODY.replace(b"30.00", b"3.00")), "signature_mismatch"),
        (signed(BODY, **{"PAYPAL-TRANSMISSION-TIME": "2023-11-14T22:13:21Z"}), "signature_mismatch"),
        (signed(BODY, webhook_id="SOMEONE0ELSES0ID"), "signature_mismatch"),
        (signed(b'{"event_type":"PAYMENT.CAPTURE.COMPLETED"}'), "malformed_payload"),
    ],
)
def test_failures(req: Request, reason: str) -> None:
    with pytest.raises(VerificationError) as exc:
        PROVIDER.verify(req, endpoint(), now=NOW)
    assert exc.value.reason == reason


@pytest.mark.parametrize("pem", [certificate(start=NOW - 400 * 86400), certificate(start=NOW + 86400)])
def test_certificate_outside_its_validity_is_refused(pem: bytes) -> None:
    with pytest.raises(VerificationError) as exc:
        PROVIDER.verify(signed(BODY), endpoint(certificate=pem.decode()), now=NOW)
    assert exc.value.reason == "signature_mismatch"


def test_validate_needs_a_webhook_id() -> None:
    with pytest.raises(ConfigError, match="'pp'"):
        PROVIDER.validate(Endpoint("pp", "paypal", ()))


def test_sign_needs_a_signing_key() -> None:
    with pytest.raises(NotImplementedError, match="signing_key"):
        PROVIDER.sign(Endpoint("pp", "paypal", (), options={"webhook_id": "X"}), BODY, now=NOW)


# -- the I/O loader's rules, without the network -------------------------------------------------

MOMENT = datetime.fromtimestamp(NOW, UTC)


def test_loader_accepts_paypal_subject_and_caches() -> None:
    fetched: list[str] = []
    cert_loader = CertLoader(
        check_chain=False, fetch=lambda url: fetched.append(url) or certificate(start=0, days=36500)
    )
    assert cert_loader(CERT_URL) == cert_loader(CERT_URL)
    assert fetched == [CERT_URL]


@pytest.mark.parametrize(
    ("pem", "check_chain", "detail"),
    [
        (certificate("evil.example.com"), False, "not PayPal's"),
        (certificate(start=NOW - 400 * 86400), False, "not valid now"),
        (b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", False, "does not parse"),
        (CERT, True, "chain"),
    ],
)
def test_loader_refuses(pem: bytes, check_chain: bool, detail: str) -> None:
    with pytest.raises(VerificationError, match=detail) as exc:
        CertLoader(check_chain=check_chain).check(pem, MOMENT)
    assert exc.value.reason == "signature_mismatch"


def test_loader_never_fetches_outside_paypal() -> None:
    with pytest.raises(VerificationError) as exc:
        CertLoader()("https://evil.example.com/v1/notifications/certs/CERT-1")
    assert exc.value.reason == "url_mismatch"


def test_loader_accepts_a_chain_to_a_configured_root(tmp_path: Path) -> None:
    """The chain check's positive path: a CA-issued server certificate for PayPal's name."""
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Test Root CA")])
    begin, end = MOMENT - timedelta(days=1), MOMENT + timedelta(days=30)
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    root = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(10)
        .not_valid_before(begin)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    subject = "messageverificationcerts.paypal.com"
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(ca_name)
        .public_key(KEY.public_key())
        .serial_number(11)
        .not_valid_before(begin)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(subject)]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    (tmp_path / "roots.pem").write_bytes(root.public_bytes(serialization.Encoding.PEM))
    pem = leaf.public_bytes(serialization.Encoding.PEM)
    assert CertLoader(ca_file=str(tmp_path / "roots.pem")).check(pem, MOMENT) == end.replace(microsecond=0).timestamp()


def test_validate_parses_a_pinned_certificate() -> None:
    PROVIDER.validate(endpoint(certificate=CERT.decode()))
    PROVIDER.validate(endpoint())
    with pytest.raises(ConfigError, match="'pp'"):
        PROVIDER.validate(endpoint(certificate="-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n"))


# -- replay: the transmission time window, and the CRC-32 that lets a body be swapped -------------


@pytest.mark.parametrize(
    ("skew", "reason"),
    [
        (-301, "timestamp_out_of_tolerance"),
        (301, "timestamp_out_of_tolerance"),
        (-299, None),
        (299, None),
        (-10 * 365 * 86400, "timestamp_out_of_tolerance"),
    ],
)
def test_transmission_time_window(skew: int, reason: str | None) -> None:
    """Signed ``skew`` seconds away from the receiver's clock (both ways), with tolerance 300."""
    _, headers = PROVIDER.sign(endpoint(cert_url=CERT_URL), BODY, now=NOW + skew)
    request = Request({k.lower(): v for k, v in headers.items()}, BODY)
    LOADED.clear()
    if reason is None:
        assert PROVIDER.verify(request, endpoint(), now=NOW).events[0].signed_at == NOW + skew
        return
    with pytest.raises(VerificationError) as exc:
        PROVIDER.verify(request, endpoint(), now=NOW)
    assert exc.value.reason == reason
    assert LOADED == []  # refused before any certificate fetch


@pytest.mark.parametrize("value", ["yesterday", "", "1700000000", "2023-13-40T00:00:00Z", "2023-11-14 22:13:20 UTC"])
def test_unparsable_transmission_time(value: str) -> None:
    req = signed(BODY, **{"PAYPAL-TRANSMISSION-TIME": value or " "})
    with pytest.raises(VerificationError) as exc:
        PROVIDER.verify(req, endpoint(), now=NOW)
    assert exc.value.reason in ("malformed_signature", "missing_signature")


def test_crc_forged_body_is_the_same_replay_key() -> None:
    """The attack: one genuine delivery's headers verify another body of the same CRC-32 (any id,
    type, amount). Its replay key is the transmission id, so the receiver stores one event."""
    genuine = signed(BODY)
    first = PROVIDER.verify(genuine, endpoint(), now=NOW)
    template = json.dumps({"id": "WH-FORGED", "event_type": "PAYMENT.CAPTURE.REFUNDED", "pad": "a" * 64}).encode()
    forged = crc_twin(template, zlib.crc32(BODY))
    second = PROVIDER.verify(Request(genuine.headers, forged), endpoint(), now=NOW)  # the attack is real
    assert second.events[0].event_id == "WH-FORGED" != first.events[0].event_id
    assert second.replay_key == first.replay_key == replay_key("paypal", genuine.header("PAYPAL-TRANSMISSION-ID"))


# -- certificate fetches: failures remembered, fetch rate bounded ----------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_failed_fetch_is_remembered_per_url() -> None:
    clock, fetched = Clock(), []

    def fetch(url: str) -> bytes:
        fetched.append(url)
        raise UnavailableError("PayPal certificate host unreachable")

    cert_loader = CertLoader(check_chain=False, fetch=fetch, clock=clock, failure_ttl=60, max_fetches=100)
    for _ in range(50):
        with pytest.raises(UnavailableError):
            cert_loader(CERT_URL)
    assert fetched == [CERT_URL]
    clock.now += 61
    with pytest.raises(UnavailableError):
        cert_loader(CERT_URL)
    assert fetched == [CERT_URL, CERT_URL]


def test_refused_certificate_is_remembered_as_a_mismatch() -> None:
    clock, fetched = Clock(), []
    cert_loader = CertLoader(
        check_chain=False, clock=clock, fetch=lambda url: fetched.append(url) or certificate("evil.example.com")
    )
    for _ in range(3):
        with pytest.raises(VerificationError) as exc:
            cert_loader(CERT_URL)
        assert exc.value.reason == "signature_mismatch"
    assert len(fetched) == 1


def test_fetch_rate_is_bounded_across_urls() -> None:
    """Unsigned requests naming ever new PayPal-looking URLs cause a few fetches a minute, not one each."""
    clock, fetched = Clock(), []

    def fetch(url: str) -> bytes:
        fetched.append(url)
        raise _fail_404()

    cert_loader = CertLoader(check_chain=False, fetch=fetch, clock=clock, max_fetches=5, per_seconds=60)
    outcomes = []
    for n in range(200):
        with pytest.raises((VerificationError, UnavailableError)) as exc:
            cert_loader(f"{CERT_URL}-{n}")
        outcomes.append(type(exc.value))
    assert len(fetched) == 5 and outcomes.count(UnavailableError) == 195
    clock.now += 61
    with pytest.raises(VerificationError):
        cert_loader(f"{CERT_URL}-new")
    assert len(fetched) == 6


def _fail_404() -> VerificationError:
    return VerificationError("signature_mismatch", "PayPal certificate host answered 404")


def test_good_certificates_stay_cached_under_the_fetch_bound() -> None:
    clock, fetched = Clock(), []
    good = certificate(start=0, days=36500)
    cert_loader = CertLoader(
        check_chain=False, clock=clock, max_fetches=1, fetch=lambda url: fetched.append(url) or good
    )
    assert all(cert_loader(CERT_URL) == good for _ in range(20))
    assert fetched == [CERT_URL]


def test_loader_fetches_over_http_and_remembers_the_failure() -> None:
    """The real fetch path against a local server (never the network): a 404 is fetched once."""
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_error(404)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = serve_in_thread(server)
    try:
        local = f"http://127.0.0.1:{server.server_address[1]}/v1/notifications/certs/CERT-x"
        cert_loader = CertLoader(check_chain=False)
        cert_loader.fetch = lambda url: cert_loader._fetch(local)  # the PayPal URL, served locally
        for _ in range(5):
            with pytest.raises(VerificationError, match="404"):
                cert_loader(CERT_URL)
        assert hits == ["/v1/notifications/certs/CERT-x"]
    finally:
        server.shutdown()
        thread.join()
