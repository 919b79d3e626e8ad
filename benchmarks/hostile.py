"""CPU per request of each hostile shape against a genuine delivery of its kind, through the WSGI
app in this one process and thread (``time.process_time``), reported as ratios from one run.

    .venv/bin/python benchmarks/hostile.py [--quick]

The embedded default (a SQLite file, no worker): genuine deliveries are first deliveries, each
stored. Hostile shapes, each refused before anything is stored: a v1a flood (782 KB of entries) on
``standard``, fresh and stale; a 150 000-parameter Twilio form (1 MB) with a junk signature; a
Stripe header of 782 KB of ``v1`` entries; deep-nested JSON to Adyen; 100 headers of 16 KiB (what
gunicorn lets through) on Stripe; PayPal deliveries naming ever new junk certificate URLs (fetched
from an in-process fake that answers 404, no network); wrong admin Basic auth guesses (against
right ones). Goal: no shape costs more than 20× a genuine delivery of its kind before it is refused.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import itertools
import json
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.x509.oid import NameOID

from webhooks import create_app, providers
from webhooks.errors import VerificationError
from webhooks.providers import paypal_certs
from webhooks.tables.revisions import upgrade

GOAL = 20.0
HOST = "hooks.example.com"
ED_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
WHPK = "whpk_" + base64.b64encode(ED_KEY.public_key().public_bytes_raw()).decode()
ADYEN_KEY = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
ADMIN_PASSWORD = "bench-admin-password"
Shape = Callable[[int], tuple[str, str, dict[str, str], bytes]]  # n -> (method, path, headers, body)


def paypal_pair() -> tuple[bytes, str]:
    """A self-signed stand-in for PayPal's certificate (valid now) and its key."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "messageverificationcerts.sandbox.paypal.com")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=30))
        .sign(key, hashes.SHA256())
    )
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return cert.public_bytes(serialization.Encoding.PEM), pem


CERT, PAYPAL_KEY = paypal_pair()
CERTS = "https://api.sandbox.paypal.com/v1/notifications/certs/"
GENUINE_CERT = CERTS + "CERT-genuine"


def fake_fetch(url: str) -> bytes:
    """PayPal's certificate host, in process: the certificate at one URL, 404 everywhere else."""
    if url == GENUINE_CERT:
        return CERT
    raise VerificationError("signature_mismatch", "PayPal certificate host answered 404")


ENDPOINTS = {
    "standard": {"provider": "standard", "secrets": [WHPK]},
    "stripe": {"provider": "stripe", "secrets": ["whsec_bench"]},
    "twilio": {"provider": "twilio", "secrets": ["12345"], "public_url": f"https://{HOST}/webhooks/twilio"},
    "adyen": {"provider": "adyen", "secrets": [ADYEN_KEY]},
    "paypal": {
        "provider": "paypal",
        "secrets": [],
        "webhook_id": "WH-BENCH",
        "signing_key": PAYPAL_KEY,
        "cert_url": GENUINE_CERT,
    },
}


def environ(method: str, path: str, headers: dict[str, str], body: bytes) -> dict[str, Any]:
    """What gunicorn hands the app."""
    raw_path, _, query = path.partition("?")
    env: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "PATH_INFO": raw_path,
        "SCRIPT_NAME": "",
        "QUERY_STRING": query,
        "RAW_URI": path,
        "SERVER_NAME": HOST,
        "SERVER_PORT": "443",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.url_scheme": "https",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_HOST": HOST,
    }
    for name, value in headers.items():
        key = name.upper().replace("-", "_")
        env[key if key == "CONTENT_TYPE" else f"HTTP_{key}"] = value
    return env


def measure(app: Any, shape: Shape, count: int) -> tuple[float, Counter[str]]:
    """µs of process CPU per request (requests built beforehand), and the answers' status lines."""
    requests = [environ(*shape(n)) for n in range(count)]
    answers: Counter[str] = Counter()

    def start_response(status: str, headers: list[tuple[str, str]], exc: Any = None) -> None:
        answers[status.split()[0]] += 1

    started = time.process_time()
    for env in requests:
        b"".join(app(env, start_response))
    return (time.process_time() - started) / count * 1e6, answers


def shapes(app: Any, tag: str) -> list[tuple[str, Shape, Shape]]:
    """(kind, genuine delivery n, hostile request n) for every shape."""
    endpoints = app.extensions["webhooks"].settings.endpoints
    serial = itertools.count()  # every genuine delivery is a first delivery, whatever the round

    def signed(name: str, body: bytes, url: str = "") -> dict[str, str]:
        return providers.get(name).sign(endpoints[name], body, now=time.time(), url=url)[1]

    def standard(n: int) -> tuple[str, str, dict[str, str], bytes]:
        n = next(serial)
        body, msg_id, ts = b'{"type":"user.created","n":%d}' % n, f"msg_{tag}_{n}", str(int(time.time()))
        sig = base64.b64encode(ED_KEY.sign(f"{msg_id}.{ts}.".encode() + body)).decode()
        headers = {
            "webhook-id": msg_id,
            "webhook-timestamp": ts,
            "webhook-signature": f"v1a,{sig}",
            "Content-Type": "application/json",
        }
        return "POST", "/webhooks/standard", headers, body

    flood = " ".join(["v1a," + base64.b64encode(bytes(64)).decode()] * 8400)  # 782 KB

    def v1a_flood(stale: bool) -> Shape:
        def shape(n: int) -> tuple[str, str, dict[str, str], bytes]:
            method, path, headers, body = standard(n)
            if stale:
                headers["webhook-timestamp"] = str(int(time.time()) - 3600)
            return method, path, {**headers, "webhook-signature": flood}, body

        return shape

    def stripe(n: int) -> tuple[str, str, dict[str, str], bytes]:
        n = next(serial)
        body = json.dumps(
            {
                "id": f"evt_{tag}_{n}",
                "object": "event",
                "created": int(time.time()),
                "type": "payment_intent.succeeded",
                "data": {"object": {"id": f"pi_{n}", "object": "payment_intent"}},
            }
        ).encode()
        return "POST", "/webhooks/stripe", {**signed("stripe", body), "Content-Type": "application/json"}, body

    many_v1 = ",".join(["v1=" + "0" * 64] * 11500)  # 782 KB

    def stripe_many_v1(n: int) -> tuple[str, str, dict[str, str], bytes]:
        method, path, headers, body = stripe(n)
        return method, path, {**headers, "Stripe-Signature": f"t={int(time.time())},{many_v1}"}, body

    big_headers = {f"X-Junk-{i}": "x" * 16384 for i in range(100)}

    def stripe_big_headers(n: int) -> tuple[str, str, dict[str, str], bytes]:
        method, path, headers, body = stripe(n)
        return method, path, {**headers, **big_headers, "Stripe-Signature": f"t={int(time.time())},v1={'0' * 64}"}, body

    def twilio(n: int) -> tuple[str, str, dict[str, str], bytes]:
        n = next(serial)
        body = urlencode(
            {
                "MessageSid": f"SM{tag}{n}",
                "MessageStatus": "delivered",
                "To": "+15550100",
                "From": "+15550101",
                "AccountSid": "AC1",
            }
        ).encode()
        return "POST", "/webhooks/twilio", signed("twilio", body, f"https://{HOST}/webhooks/twilio"), body

    form = b"&".join(b"p%06d=x" % i for i in range(150_000))  # 1.2 MB

    def twilio_flood(n: int) -> tuple[str, str, dict[str, str], bytes]:
        headers = {
            "X-Twilio-Signature": base64.b64encode(hashlib.sha1(b"%d" % n).digest()).decode(),
            "Content-Type": "application/x-www-form-urlencoded",
        }
        return "POST", "/webhooks/twilio", headers, form

    def adyen(n: int) -> tuple[str, str, dict[str, str], bytes]:
        n = next(serial)
        raw = json.dumps(
            {
                "live": "false",
                "notificationItems": [
                    {
                        "NotificationRequestItem": {
                            "pspReference": f"{tag}{n}",
                            "eventCode": "AUTHORISATION",
                            "success": "true",
                            "merchantAccountCode": "M",
                            "merchantReference": f"r{n}",
                            "amount": {"value": 100, "currency": "EUR"},
                            "eventDate": "2024-01-01T00:00:00+01:00",
                            "additionalData": {},
                        }
                    }
                ],
            }
        ).encode()
        body, headers = providers.get("adyen").sign(endpoints["adyen"], raw, now=time.time())
        return "POST", "/webhooks/adyen", {**headers, "Content-Type": "application/json"}, body

    deep = b'{"notificationItems":' + b"[" * 500_000 + b"]" * 500_000 + b"}"  # 1 MB

    def adyen_deep(n: int) -> tuple[str, str, dict[str, str], bytes]:
        return "POST", "/webhooks/adyen", {"Content-Type": "application/json"}, deep

    def paypal(n: int) -> tuple[str, str, dict[str, str], bytes]:
        n = next(serial)
        body = json.dumps({"id": f"WH-{tag}-{n}", "event_type": "PAYMENT.CAPTURE.COMPLETED"}).encode()
        headers = signed("paypal", body)
        headers["PAYPAL-TRANSMISSION-ID"] = str(uuid.uuid4())  # distinct: sign() derives it from time and body
        return "POST", "/webhooks/paypal", signed_again(headers, body), body

    def signed_again(headers: dict[str, str], body: bytes) -> dict[str, str]:
        from webhooks.providers.paypal import signed_string  # the signed string, for the new transmission id

        key = serialization.load_pem_private_key(PAYPAL_KEY.encode(), password=None)
        assert isinstance(key, rsa.RSAPrivateKey)
        message = signed_string(
            headers["PAYPAL-TRANSMISSION-ID"], headers["PAYPAL-TRANSMISSION-TIME"], "WH-BENCH", body
        )
        from cryptography.hazmat.primitives.asymmetric import padding

        sig = key.sign(message, padding.PKCS1v15(), hashes.SHA256())
        return {**headers, "PAYPAL-TRANSMISSION-SIG": base64.b64encode(sig).decode()}

    def paypal_junk_url(n: int) -> tuple[str, str, dict[str, str], bytes]:
        method, path, headers, body = paypal(n)
        return (
            method,
            path,
            {**headers, "PAYPAL-CERT-URL": f"{CERTS}CERT-junk-{tag}-{n}", "PAYPAL-TRANSMISSION-SIG": "A" * 344},
            body,
        )

    def admin(password: str) -> Shape:
        auth = "Basic " + base64.b64encode(f"admin:{password}".encode()).decode()
        return lambda n: ("GET", "/admin/api/events", {"Authorization": auth}, b"")

    return [
        ("standard", standard, v1a_flood(stale=False)),
        ("standard", standard, v1a_flood(stale=True)),
        ("twilio", twilio, twilio_flood),
        ("stripe", stripe, stripe_many_v1),
        ("adyen", adyen, adyen_deep),
        ("stripe", stripe, stripe_big_headers),
        ("paypal", paypal, paypal_junk_url),
        ("admin", admin(ADMIN_PASSWORD), admin("wrong-guess")),
    ]


NAMES = [
    "v1a flood, 782 KB (fresh)",
    "v1a flood, 782 KB (stale)",
    "150 000-param form, junk sig",
    "many-v1 header, 782 KB",
    "deep-nested JSON, 1 MB",
    "100 headers of 16 KiB",
    "junk cert URLs",
    "wrong Basic auth guesses",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    args = parser.parse_args()
    genuine_n, hostile_n = (20, 5) if args.quick else (200, 30)
    paypal_certs.default_loader = paypal_certs.CertLoader(check_chain=False, fetch=fake_fetch)
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{folder}/webhooks.db"
        upgrade(url)
        app = create_app(
            {
                "DATABASE_URL": url,
                "WEBHOOKS_EMBEDDED_WORKER": "false",
                "ENDPOINTS": ENDPOINTS,
                "WEBHOOKS_ADMIN_PASSWORD": ADMIN_PASSWORD,
                "WEBHOOKS_MAX_BODY_BYTES": str(2 << 20),
                "WEBHOOKS_LOG_LEVEL": "CRITICAL",
            }
        )
        print(f"{'kind':<10}{'shape':<32}{'genuine µs':>11}{'hostile µs':>12}{'× genuine':>10}  answers")
        worst = 0.0
        for round_, (kind, genuine, hostile) in enumerate(shapes(app, uuid.uuid4().hex[:8])):
            measure(app, genuine, 5)  # warm: caches, the PayPal certificate, first-use imports
            base, _ = measure(app, genuine, genuine_n)
            cost, answers = measure(app, hostile, hostile_n)
            worst = max(worst, cost / base)
            shown = ", ".join(f"{n}× {s}" for s, n in sorted(answers.items()))
            print(f"{kind:<10}{NAMES[round_]:<32}{base:>11.0f}{cost:>12.0f}{cost / base:>10.1f}  {shown}")
        verdict = "within" if worst <= GOAL else "OVER"
        print(
            f"worst {worst:.1f}× a genuine delivery of its kind: {verdict} the goal of {GOAL:.0f}×; "
            f"{genuine_n} genuine and {hostile_n} hostile requests each, one thread, process CPU"
        )


if __name__ == "__main__":
    main()
