"""Plaid: the JWT both ways against PyJWT (the check Plaid's docs run) over randomized events, the key
endpoint against plaid-python's own client and models (a fake Plaid API on 127.0.0.1), payload
files, one test per failure rule (alg none/HS256, stale iat, body hash), the key budget (junk kids
never starve a genuine delivery), and through the app: stored once under concurrent duplicates,
refusals store nothing, a re-signed (malleated) or re-labelled capture is no second event.

Plaid's docs give no fixed vector (its keys rotate and the JWT's iat must be fresh): the vectors
here are the docs' example key answer and JWT header, cited where used.
Docs: https://plaid.com/docs/api/webhooks/webhook-verification/
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import jwt
import plaid
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from flask import Flask
from plaid.api import plaid_api
from plaid.model.webhook_verification_key_get_request import WebhookVerificationKeyGetRequest

from tests.conftest import base_config, make_app, rows
from tests.fake_apis import serve
from webhooks.errors import ConfigError, PayloadError, UnavailableError, VerificationError
from webhooks.providers.base import Endpoint, Request, content_id
from webhooks.providers.plaid import HEADER, Plaid
from webhooks.providers.plaid_jose import allowed_base, b64url, jwk_of, public_key
from webhooks.providers.plaid_keys import KeyLoader

PAYLOADS = Path(__file__).parents[1] / "payloads" / "plaid"
BODY = (PAYLOADS / "TRANSACTIONS.SYNC_UPDATES_AVAILABLE__basic.json").read_bytes()
KID = "bfbd5111-8e33-4643-8ced-b2e642a72f3c"  # the kid of the docs' example JWT header
KEY = ec.generate_private_key(ec.SECP256R1())
PEM = KEY.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
JWK = jwk_of(KEY.public_key(), KID)
NOW = 1_700_000_000
ORACLE_EVENTS = 250
PROVIDER = Plaid()
P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
# The docs' example answer of /webhook_verification_key/get (its x/y replaced by our key's)
DOCS_ANSWER = {
    "key": {
        "alg": "ES256",
        "created_at": 1560466150,
        "crv": "P-256",
        "expired_at": None,
        "kid": KID,
        "kty": "EC",
        "use": "sig",
        "x": JWK["x"],
        "y": JWK["y"],
    },
    "request_id": "Ca5Pz6ykAjTpqsb",
}


def pinned(**options: Any) -> Endpoint:
    return Endpoint(
        "plaid", "plaid", (), options={"verification_key": JWK, "signing_key": PEM.decode(), "key_id": KID, **options}
    )


def signed(body: bytes, *, now: float = NOW, endpoint: Endpoint | None = None) -> Request:
    _, headers = PROVIDER.sign(endpoint or pinned(), body, now=now)
    return Request({k.lower(): v for k, v in headers.items()}, body)


def outcome(request: Request, endpoint: Endpoint | None = None, provider: Plaid = PROVIDER) -> str:
    try:
        provider.verify(request, endpoint or pinned(), now=NOW)
    except VerificationError as exc:
        return str(exc.reason)
    except UnavailableError:
        return "unavailable"
    return "ok"


# -- PyJWT as the oracle, both ways (Plaid's docs: decode with the JWK, ES256 only, then iat and the hash)


def docs_check(token: str, body: bytes, jwk: dict[str, Any], now: float) -> bool:
    """The verification Plaid's docs show, with PyJWT: the kid's key, ES256 only, iat within 5 min,
    the body's SHA-256 equal to the claim."""
    try:
        if jwt.get_unverified_header(token).get("kid") != jwk["kid"] or jwk["expired_at"] is not None:
            return False
        claims = jwt.decode(token, jwt.PyJWK(jwk).key, algorithms=["ES256"], options={"verify_iat": False})
    except jwt.PyJWTError:
        return False
    fresh = isinstance(claims.get("iat"), int) and abs(now - claims["iat"]) <= 300
    return fresh and claims.get("request_body_sha256") == hashlib.sha256(body).hexdigest()


def hs256(claims: dict[str, Any], secret: bytes) -> str:
    head = b64url(json.dumps({"alg": "HS256", "kid": KID, "typ": "JWT"}).encode())
    signing_input = f"{head}.{b64url(json.dumps(claims).encode())}"
    return f"{signing_input}.{b64url(hmac.new(secret, signing_input.encode(), hashlib.sha256).digest())}"


def random_event(rng: random.Random) -> bytes:
    kind, code = rng.choice(
        [
            ("TRANSACTIONS", "SYNC_UPDATES_AVAILABLE"),
            ("ITEM", "ERROR"),
            ("ITEM", "PENDING_EXPIRATION"),
            ("AUTH", "AUTOMATICALLY_VERIFIED"),
            ("HOLDINGS", "DEFAULT_UPDATE"),
            ("TRANSFER", "TRANSFER_EVENTS_UPDATE"),
        ]
    )
    event: dict[str, Any] = {
        "webhook_type": kind,
        "webhook_code": code,
        "environment": rng.choice(["sandbox", "production"]),
    }
    if kind != "TRANSFER":
        event["item_id"] = "".join(rng.choices("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", k=37))
    event["note"] = "".join(rng.choices('abc é€😀"\\/\n\t ', k=rng.randrange(0, 20)))
    return json.dumps(event, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 2])).encode()


def test_jwt_oracle_both_ways_over_randomized_events() -> None:
    """Ours signs → PyJWT (the docs' check) accepts; PyJWT signs → we accept; then both judge the
    same tampered, stale, foreign-key or alg-swapped deliveries: 0 disagreements."""
    rng = random.Random(20261202)
    other = ec.generate_private_key(ec.SECP256R1())
    disagreements = []
    for n in range(ORACLE_EVENTS):
        body, at = random_event(rng), NOW + rng.randrange(-250, 250)
        ours = signed(body, now=at)
        assert docs_check(ours.headers["plaid-verification"], body, JWK, NOW), n
        claims = {"iat": at, "request_body_sha256": hashlib.sha256(body).hexdigest()}
        theirs = jwt.encode(claims, KEY, algorithm="ES256", headers={"kid": KID})
        event = PROVIDER.verify(Request({"plaid-verification": theirs}, body), pinned(), now=NOW).events[0]
        assert event.event_id == content_id(theirs.rsplit(".", 1)[0].encode()) and event.signed_at == at
        case = rng.choice(["genuine", "body", "stale", "foreign", "hs256", "none"])
        sent_body, token = body, theirs
        if case == "body":
            sent_body = body.replace(b"webhook", b"webhooK", 1)
        elif case == "stale":
            token = jwt.encode({**claims, "iat": NOW - 301 - rng.randrange(1000)}, KEY, "ES256", headers={"kid": KID})
        elif case == "foreign":
            token = jwt.encode(claims, other, algorithm="ES256", headers={"kid": KID})
        elif case == "hs256":  # key confusion: the public JWK as an HMAC secret (PyJWT will not encode it)
            token = hs256(claims, json.dumps(JWK).encode())
        elif case == "none":
            token = jwt.encode(claims, None, algorithm="none", headers={"kid": KID})
        sdk = docs_check(token, sent_body, JWK, NOW)
        mine = outcome(Request({"plaid-verification": token}, sent_body))
        if sdk != (mine == "ok") or (case == "genuine") != sdk:
            disagreements.append((n, case, mine))
    assert disagreements == []


# -- the key endpoint: plaid-python's client and models against the fake Plaid API ----------------


class FakePlaid:
    """/webhook_verification_key/get as Plaid answers it (the docs' example; 400 for an unknown kid)."""

    def __init__(self) -> None:
        self.keys: dict[str, dict[str, Any]] = {KID: dict(DOCS_ANSWER["key"])}
        self.hits: list[tuple[str, dict[str, Any], dict[str, str]]] = []
        self.lock = threading.Lock()

    def __call__(self, method: str, path: str, query: Any, headers: Any, body: bytes) -> tuple[int, Any]:
        sent = json.loads(body or b"{}")
        with self.lock:
            self.hits.append((path, sent, {k.lower(): v for k, v in headers.items()}))
        client = sent.get("client_id") or headers.get("PLAID-CLIENT-ID")
        secret = sent.get("secret") or headers.get("PLAID-SECRET")
        if method != "POST" or path != "/webhook_verification_key/get":
            return 404, {"error_type": "INVALID_REQUEST", "error_code": "NOT_FOUND"}
        if (client, secret) != ("client-1", "secret-1"):
            return 400, {"error_type": "INVALID_INPUT", "error_code": "INVALID_API_KEYS", "request_id": "r"}
        key = self.keys.get(str(sent.get("key_id")))
        if key is None:
            return 400, {"error_type": "INVALID_INPUT", "error_code": "INVALID_WEBHOOK_VERIFICATION_KEY_ID"}
        return 200, {"key": key, "request_id": "Ca5Pz6ykAjTpqsb"}


@pytest.fixture
def fake() -> Iterator[tuple[str, FakePlaid]]:
    api = FakePlaid()
    with serve(api) as base:
        yield base, api


def fetched(base: str, secret: str = "secret-1", **options: Any) -> Endpoint:
    """An endpoint that fetches its key from ``base``; Plaid's API secret is its ``secret`` (``secrets``)."""
    signing = {"signing_key": PEM.decode(), "key_id": KID}
    return Endpoint(
        "plaid", "plaid", (secret,), options={"client_id": "client-1", "api_base": base, **signing, **options}
    )


def test_plaid_python_reads_the_fake_as_plaid_and_our_loader_agrees(fake: tuple[str, FakePlaid]) -> None:
    """The SDK's own client posts to the fake and parses its answer into its models
    (``WebhookVerificationKeyGetResponse`` / ``JWKPublicKey``): the key our loader returns is that
    model's, and our request's fields are the SDK's request model's."""
    base, api = fake
    config = plaid.Configuration(host=base, api_key={"clientId": "client-1", "secret": "secret-1"})
    sdk = plaid_api.PlaidApi(plaid.ApiClient(config))
    answer = sdk.webhook_verification_key_get(WebhookVerificationKeyGetRequest(key_id=KID))
    model = answer.key.to_dict()
    loaded = KeyLoader()(fetched(base), KID)
    assert dict(loaded) == model and public_key(model).public_numbers() == KEY.public_key().public_numbers()
    (_, sdk_body, _), (_, our_body, _) = api.hits
    WebhookVerificationKeyGetRequest(**our_body)  # every field we send is one the SDK's request model has
    assert our_body["key_id"] == sdk_body["key_id"] == KID
    with pytest.raises(plaid.ApiException):  # the SDK sees Plaid's 400 for a kid it never issued...
        sdk.webhook_verification_key_get(WebhookVerificationKeyGetRequest(key_id="junk-kid"))
    with pytest.raises(VerificationError) as exc:  # ...and so do we
        KeyLoader()(fetched(base), "junk-kid")
    assert exc.value.reason == "signature_mismatch"


def test_a_genuine_delivery_through_the_fake_and_the_key_cached(fake: tuple[str, FakePlaid]) -> None:
    base, api = fake
    provider, endpoint = Plaid(key_loader=KeyLoader()), fetched(base)
    for n in range(5):
        request = signed(BODY.replace(b"production", f"production{n}".encode()), endpoint=endpoint)
        assert outcome(request, endpoint, provider) == "ok"
    assert len(api.hits) == 1  # fetched once, then cached


def test_refusals_that_need_no_key_fetch_none(fake: tuple[str, FakePlaid]) -> None:
    base, api = fake
    provider, endpoint = Plaid(key_loader=KeyLoader()), fetched(base)
    stale = signed(BODY, now=NOW - 301, endpoint=endpoint)
    tampered = Request(signed(BODY, endpoint=endpoint).headers, BODY.replace(b"true", b"false"))
    none = jwt.encode({"iat": NOW, "request_body_sha256": hashlib.sha256(BODY).hexdigest()}, None, "none", {"kid": "k"})
    assert outcome(stale, endpoint, provider) == "timestamp_out_of_tolerance"
    assert outcome(tampered, endpoint, provider) == "signature_mismatch"
    assert outcome(Request({"plaid-verification": none}, BODY), endpoint, provider) == "malformed_signature"
    assert api.hits == []


def test_junk_kids_never_starve_a_genuine_delivery(fake: tuple[str, FakePlaid]) -> None:
    """One sender floods junk kids: it spends its own budget (then 503s), each junk kid is fetched
    once; a genuine delivery from Plaid's address still fetches its key and is accepted."""
    base, api = fake
    provider, endpoint = Plaid(key_loader=KeyLoader(per_sender=10, max_fetches=120)), fetched(base)
    digest = hashlib.sha256(BODY).hexdigest()
    outcomes = []
    for n in range(40):
        token = jwt.encode({"iat": NOW, "request_body_sha256": digest}, KEY, "ES256", {"kid": f"junk-{n % 20}"})
        outcomes.append(
            outcome(Request({"plaid-verification": token}, BODY, sender="198.51.100.9"), endpoint, provider)
        )
    assert outcomes.count("signature_mismatch") == 20 and outcomes.count("unavailable") == 20
    assert len(api.hits) == 10  # its per-sender budget, each junk kid at most once
    genuine = replace(signed(BODY, endpoint=endpoint), sender="52.21.26.131")
    assert outcome(genuine, endpoint, provider) == "ok"
    assert outcome(replace(genuine, sender="198.51.100.9"), endpoint, provider) == "ok"  # cached: no budget needed


def test_concurrent_requests_for_one_new_kid_share_one_fetch(fake: tuple[str, FakePlaid]) -> None:
    base, api = fake
    provider, endpoint = Plaid(key_loader=KeyLoader()), fetched(base)
    requests = [signed(BODY.replace(b"production", f"p{n}".encode()), endpoint=endpoint) for n in range(10)]
    with ThreadPoolExecutor(10) as pool:
        assert list(pool.map(lambda r: outcome(r, endpoint, provider), requests)) == ["ok"] * 10
    assert len(api.hits) == 1


def test_an_expired_key_and_plaid_errors(fake: tuple[str, FakePlaid]) -> None:
    base, api = fake
    api.keys[KID]["expired_at"] = 1_600_000_000
    endpoint = fetched(base)
    assert outcome(signed(BODY, endpoint=endpoint), endpoint, Plaid(key_loader=KeyLoader())) == "signature_mismatch"
    wrong = fetched(base, secret="not-ours")  # Plaid's INVALID_API_KEYS: our configuration, a 503 Plaid retries
    assert outcome(signed(BODY, endpoint=wrong), wrong, Plaid(key_loader=KeyLoader())) == "unavailable"
    down = fetched("http://127.0.0.1:9")  # nothing listens: Plaid unreachable is a 503 Plaid retries
    assert outcome(signed(BODY, endpoint=down), down, Plaid(key_loader=KeyLoader(timeout=2))) == "unavailable"


@pytest.mark.parametrize(
    ("base", "ok"),
    [
        ("https://production.plaid.com", True),
        ("https://sandbox.plaid.com/", True),
        ("http://127.0.0.1:8000", True),
        ("http://production.plaid.com", False),
        ("https://production.plaid.com.evil.example", False),
        ("https://user@production.plaid.com", False),
        ("https://production.plaid.com/v1", False),
        ("https://10.0.0.7", False),
    ],
)
def test_api_base_is_host_pinned(base: str, ok: bool) -> None:
    assert allowed_base(base) is ok
    endpoint = fetched(base)
    if ok:
        PROVIDER.validate(endpoint)
    else:
        with pytest.raises(ConfigError, match="api_base"):
            PROVIDER.validate(endpoint)


# -- payload files, failure rules, start-up ---------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "event_type", "item"),
    [
        (
            "TRANSACTIONS.SYNC_UPDATES_AVAILABLE__basic.json",
            "TRANSACTIONS.SYNC_UPDATES_AVAILABLE",
            "wz666MBjYWTp2PDzzggYhM6oWWmBb",
        ),
        ("ITEM.ERROR__login_required.json", "ITEM.ERROR", "wz666MBjYWTp2PDzzggYhM6oWWmBb"),
        ("TRANSFER.TRANSFER_EVENTS_UPDATE__no_item.json", "TRANSFER.TRANSFER_EVENTS_UPDATE", None),
    ],
)
def test_payload_files(name: str, event_type: str, item: str | None) -> None:
    body = (PAYLOADS / name).read_bytes()
    request = signed(body)
    result = PROVIDER.verify(request, pinned(), now=NOW)
    (event,) = result.events
    signing_input = request.headers["plaid-verification"].rsplit(".", 1)[0].encode()
    assert (event.event_id, event.event_type, event.object_id) == (content_id(signing_input), event_type, item)
    assert PROVIDER.extract(event.event_type, PROVIDER.event_data(body, None)) is None  # no object version


def swapped(request: Request, part: int, value: dict[str, Any]) -> Request:
    parts = request.headers["plaid-verification"].split(".")
    parts[part] = b64url(json.dumps(value).encode())
    return Request({"plaid-verification": ".".join(parts)}, request.body)


GENUINE = signed(BODY)
CLAIMS = {"iat": NOW, "request_body_sha256": hashlib.sha256(BODY).hexdigest()}


@pytest.mark.parametrize(
    ("req", "reason"),
    [
        (Request({}, BODY), "missing_signature"),
        (Request({"plaid-verification": "a.b"}, BODY), "malformed_signature"),
        (Request({"plaid-verification": "x" * 3000}, BODY), "malformed_signature"),
        (swapped(GENUINE, 0, {"alg": "none", "kid": KID}), "malformed_signature"),
        (swapped(GENUINE, 0, {"alg": "HS256", "kid": KID}), "malformed_signature"),
        (swapped(GENUINE, 0, {"alg": "ES256"}), "malformed_signature"),
        (swapped(GENUINE, 0, {"alg": "ES256", "kid": "other-kid"}), "signature_mismatch"),
        (swapped(GENUINE, 0, {"alg": "ES256", "kid": KID, "typ": "JWT", "x": 1}), "signature_mismatch"),
        (
            swapped(GENUINE, 1, {"iat": str(NOW), "request_body_sha256": CLAIMS["request_body_sha256"]}),
            "malformed_signature",
        ),
        (swapped(GENUINE, 1, {**CLAIMS, "iat": NOW - 301}), "timestamp_out_of_tolerance"),
        (swapped(GENUINE, 1, {**CLAIMS, "iat": NOW + 301}), "timestamp_out_of_tolerance"),
        (swapped(GENUINE, 1, {**CLAIMS, "iat": NOW + 1}), "signature_mismatch"),
        (Request(GENUINE.headers, BODY + b" "), "signature_mismatch"),
        (
            signed(
                BODY,
                endpoint=replace(
                    pinned(),
                    options={
                        **pinned().options,
                        "signing_key": ec.generate_private_key(ec.SECP256R1())
                        .private_bytes(
                            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
                        )
                        .decode(),
                    },
                ),
            ),
            "signature_mismatch",
        ),
    ],
    ids=[
        "none",
        "two-parts",
        "huge",
        "alg-none",
        "alg-hs256",
        "no-kid",
        "other-kid",
        "header-changed",
        "iat-text",
        "stale",
        "future",
        "iat-changed",
        "body-changed",
        "wrong-key",
    ],
)
def test_failures(req: Request, reason: str) -> None:
    assert outcome(req) == reason


def test_a_genuine_signature_over_a_body_without_a_type_is_malformed_payload() -> None:
    with pytest.raises(PayloadError):
        PROVIDER.verify(signed(b'{"item_id": "x"}'), pinned(), now=NOW)


def test_credentials_or_a_pinned_key_are_required_at_start_up() -> None:
    for secrets, options in (
        ((), {}),
        ((), {"client_id": "c"}),
        (("s",), {}),
        (("s",), {"client_id": ""}),
        (("",), {"client_id": "c"}),
    ):
        with pytest.raises(ConfigError, match="'plaid'"):
            PROVIDER.validate(Endpoint("plaid", "plaid", secrets, options=options))
    for bad in ({"kty": "RSA"}, "{not json", {**JWK, "crv": "P-384"}, {**JWK, "alg": "HS256"}):
        with pytest.raises(ConfigError, match="verification_key"):
            PROVIDER.validate(Endpoint("plaid", "plaid", (), options={"verification_key": bad}))
    with pytest.raises(ConfigError, match="signing_key"):
        PROVIDER.validate(pinned(signing_key="not a key"))
    PROVIDER.validate(pinned())
    PROVIDER.validate(Endpoint("plaid", "plaid", ("s",), options={"client_id": "c"}))


def test_send_without_a_signing_key_says_why() -> None:
    with pytest.raises(NotImplementedError, match="signing_key"):
        PROVIDER.sign(Endpoint("plaid", "plaid", (), options={"verification_key": JWK}), BODY, now=NOW)


# -- through the app ------------------------------------------------------------------------------


@pytest.fixture
def plaid_app(sqlite_url: str) -> Flask:
    config = {"provider": "plaid", "verification_key": json.dumps(JWK), "signing_key": PEM.decode(), "key_id": KID}
    return make_app(base_config(sqlite_url, ENDPOINTS={"plaid": config}))


def post(app: Flask, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    response = app.test_client().post("/webhooks/plaid", data=body, headers=headers)
    return response.status_code, response.get_json()


def stored(app: Flask) -> list[tuple[str, str]]:
    return [tuple(r) for r in rows(app, "SELECT event_id, event_type FROM events WHERE endpoint = 'plaid'")]


def test_ten_concurrent_duplicates_are_stored_once(plaid_app: Flask) -> None:
    _, headers = PROVIDER.sign(pinned(), BODY, now=time.time())
    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda _: post(plaid_app, BODY, headers)[0], range(10)))
    assert answers == [200] * 10
    signing_input = headers[HEADER].rsplit(".", 1)[0].encode()
    assert stored(plaid_app) == [(content_id(signing_input), "TRANSACTIONS.SYNC_UPDATES_AVAILABLE")]


def test_refusals_store_nothing_and_name_their_reason(plaid_app: Flask) -> None:
    now = time.time()
    _, headers = PROVIDER.sign(pinned(), BODY, now=now)
    _, stale = PROVIDER.sign(pinned(), BODY, now=now - 600)
    other = ec.generate_private_key(ec.SECP256R1())
    foreign = jwt.encode(
        {"iat": int(now), "request_body_sha256": hashlib.sha256(BODY).hexdigest()}, other, "ES256", {"kid": KID}
    )
    assert post(plaid_app, BODY.replace(b"true", b"false"), headers) == (400, {"error": "signature_mismatch"})
    assert post(plaid_app, BODY, {HEADER: foreign}) == (400, {"error": "signature_mismatch"})
    assert post(plaid_app, BODY, stale) == (400, {"error": "timestamp_out_of_tolerance"})
    assert post(plaid_app, BODY, {}) == (400, {"error": "missing_signature"})
    assert stored(plaid_app) == []


def test_a_malleated_or_relabelled_capture_is_no_second_event(plaid_app: Flask) -> None:
    """ECDSA's (r, n - s) is a second valid signature of the same input: the id is the input's."""
    _, headers = PROVIDER.sign(pinned(), BODY, now=time.time())
    assert post(plaid_app, BODY, headers)[0] == 200
    head, sig = headers[HEADER].rsplit(".", 1)
    raw = jwt.utils.base64url_decode(sig)
    malleated = raw[:32] + (P256_ORDER - int.from_bytes(raw[32:])).to_bytes(32)
    twin = {HEADER: f"{head}.{b64url(malleated)}"}
    first = PROVIDER.verify(Request({"plaid-verification": headers[HEADER]}, BODY), pinned(), now=time.time())
    second = PROVIDER.verify(Request({"plaid-verification": twin[HEADER]}, BODY), pinned(), now=time.time())
    assert second.events[0].event_id == first.events[0].event_id  # a valid twin, the same event
    assert post(plaid_app, BODY, twin)[0] == 200
    assert post(plaid_app, BODY, headers | {"X-Request-Id": "relabelled", "Plaid-Webhook-Id": "minted"})[0] == 200
    assert len(stored(plaid_app)) == 1
