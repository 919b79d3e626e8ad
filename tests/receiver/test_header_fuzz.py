"""Hostile senders II, findings 14 and 15, through the real WSGI app on SQLite and PostgreSQL:
deeply nested JSON is a clean ``malformed_payload`` (one log line at most, never a traceback),
and every header a verifier reads, for every kind, given non-ASCII, surrogate, huge, empty or
oddly punctuated values as a WSGI server passes them, gets a 4xx JSON reason or (a genuine
delivery) a 2xx — never a 5xx, never a stored row for a refusal."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flask import Flask
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from werkzeug.test import EnvironBuilder

from tests.conftest import ADYEN_KEY, base_config, make_app, rows, runtime
from tests.support.catalogue import HOST, all_endpoints, genuine
from webhooks.providers.base import hmac_digest
from webhooks.receiver.batch import committer
from webhooks.vocabulary import Reason

BASIC = "adyen-user:s3cret"
NAMES = [
    "stripe",
    "adyen",
    "adyen_basic",
    "standard",
    "github",
    "shopify",
    "slack",
    "twilio",
    "sendgrid",
    "paypal",
    "hmac",
    "hmac_by_header",
    "checkout",
    "paystack",
    "lemonsqueezy",
    "razorpay",
    "paddle",
    "gocardless",
    "square",
    "zoom",
    "mailgun",
    "braintree",
    "sns",
    "plaid",
    "mollie",
    "mercadopago",
]
# Headers the verifiers read beyond those a genuine delivery carries (tests/providers/test_fuzz.py has the list per kind).
READ = {
    "standard": ["svix-id", "svix-timestamp", "svix-signature"],
    "github": ["X-GitHub-Delivery", "X-GitHub-Event"],
    "shopify": ["Shopify-Hmac-Sha256", "X-Shopify-Webhook-Id", "X-Shopify-Topic", "X-Shopify-Event-Id"],
    "twilio": ["X-Twilio-Webhooks-Signature-Settings", "I-Twilio-Idempotency-Token"],
    "adyen": ["HmacSignature"],
    "adyen_basic": ["HmacSignature"],
    "hmac": ["X-Type"],
    "lemonsqueezy": ["X-Event-Name"],
    "square": ["X-Square-Signature", "Square-Environment"],
}
COMMON = ["Authorization", "Content-Type", "Content-Length", "Content-Encoding"]
REASONS = {str(r) for r in Reason}


@pytest.fixture(params=["sqlite", "postgres"])
def kinds_app(request: pytest.FixtureRequest) -> Iterator[Flask]:
    """Every kind's endpoint (tests/support/catalogue.py), and an Adyen one with basic auth.

    Its duplicate counts are written before its database goes: else their timer fires a second
    later, in the next test, and logs that it could not count them."""
    if request.param == "sqlite":
        config = base_config(request.getfixturevalue("sqlite_url"))
    else:
        config = base_config(request.getfixturevalue("pg_url"), REDIS_URL=request.getfixturevalue("redis_url"))
    config["ENDPOINTS"] = all_endpoints() | {
        "adyen_basic": {"provider": "adyen", "secrets": [ADYEN_KEY], "basic_auth": BASIC}
    }
    app = make_app(config)
    yield app
    committer(runtime(app)).duplicates.flush()


def delivery(app: Flask, name: str, payload: bytes | None = None) -> tuple[bytes, dict[str, str], str]:
    """A genuine delivery (Adyen signed by its ``HmacSignature`` header when the body is no batch)."""
    if name.startswith("adyen") and payload is not None:
        mac = base64.b64encode(hmac_digest(bytes.fromhex(ADYEN_KEY), payload)).decode()
        return payload, {"HmacSignature": mac, "Authorization": basic(BASIC)}, f"/webhooks/{name}"
    try:
        body, headers, path = genuine(app, name, payload)
    except ValueError:  # Mailgun signs inside a JSON object: a body that is none goes unsigned
        return payload or b"", {}, f"/webhooks/{name}"
    if name == "adyen_basic":
        headers["Authorization"] = basic(BASIC)
    return body, headers, path


def basic(credentials: str) -> str:
    return "Basic " + base64.b64encode(credentials.encode()).decode()


def environ_key(name: str) -> str:
    upper = name.upper().replace("-", "_")
    return upper if upper in ("CONTENT_TYPE", "CONTENT_LENGTH") else f"HTTP_{upper}"


def call(app: Flask, path: str, body: bytes, headers: dict[str, str], raw: dict[str, str]) -> tuple[int, bytes]:
    """POST through the app's WSGI entry, ``raw`` header values put in the environ as a WSGI
    server would (latin-1 decoded text, no re-encoding by a client library)."""
    environ = EnvironBuilder(
        path=path, method="POST", data=body, headers=headers, base_url=f"https://{HOST}"
    ).get_environ()
    for name, value in raw.items():
        environ[environ_key(name)] = value
    got: list[str] = []
    answer = b"".join(app(environ, lambda status, _headers, *_: got.append(status)))  # type: ignore[arg-type]
    return int(got[0].split()[0]), answer


def judged(app: Flask, status: int, answer: bytes, before: int) -> None:
    """Never a 5xx; a refusal is a JSON reason and stores nothing."""
    assert status < 500, (status, answer)
    if status >= 400:
        assert json.loads(answer)["error"] in REASONS, answer
        assert rows(app, "SELECT count(*) FROM events") == [(before,)]


def deep(depth: int, kind: str) -> bytes:
    if kind == "array":
        return b"[" * depth + b"]" * depth
    return b'{"id": "evt_1", "type": "t", "data": ' + b'{"a": ' * depth + b"1" + b"}" * depth + b"}"


@pytest.mark.parametrize("shape", ["array", "object"])
def test_deeply_nested_json_is_refused_without_a_traceback(
    kinds_app: Flask, shape: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Finding 14: ``[[[[…`` past the recursion limit raised RecursionError inside ``json.loads``
    and was logged as an ERROR with a full traceback. Every kind, unsigned and genuinely signed:
    a 4xx with its reason (Adyen: 400 ``malformed_payload``), no traceback, no error line."""
    body = deep(100_000, shape)
    caplog.set_level(logging.DEBUG, logger="webhooks")
    for name in NAMES:
        signed_body, headers, path = delivery(kinds_app, name, body)
        for sent, sent_headers in ((body, {}), (signed_body, headers)):
            before = rows(kinds_app, "SELECT count(*) FROM events")[0][0]
            caplog.clear()
            status, answer = call(kinds_app, path, sent, sent_headers, {})
            judged(kinds_app, status, answer, before)
            assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR], (name, caplog.text)
            assert "Traceback" not in caplog.text
            if name == "adyen" or (name == "adyen_basic" and sent_headers):  # basic auth comes first
                assert (status, json.loads(answer)) == (400, {"error": "malformed_payload"}), name


NON_ASCII_BASIC = [
    "Basic \xe9\xe9\xe9\xe9",
    "Basic \xff",
    "Basic YWR5ZW4tdXNlcjpzM2NyZXQ=\xa0",
    "Basic \udcff",
    "Basic " + "\xe9" * 5000,
    "Basic",
    "Basic ",
    "Basic ===",
]


def test_non_ascii_basic_auth_is_bad_basic_auth(kinds_app: Flask) -> None:
    """Finding 15: ``Authorization: Basic <non-ASCII>`` answered 500 (``b64decode`` of a str
    with non-ASCII raises ``ValueError``, in the quarantine's credentials check)."""
    body, headers, path = delivery(kinds_app, "adyen_basic")
    for value in NON_ASCII_BASIC:
        status, answer = call(kinds_app, path, body, headers, {"Authorization": value})
        assert (status, json.loads(answer)) == (401, {"error": "bad_basic_auth"}), value
    assert rows(kinds_app, "SELECT count(*) FROM events") == [(0,)]
    assert call(kinds_app, path, body, headers, {})[0] == 200  # the genuine credentials still pass


def _spliced(value: str, junk: str, at: int) -> str:
    at = at % (len(value) + 1)
    return value[:at] + junk + value[at:]


latin1 = st.text(st.characters(min_codepoint=0x80, max_codepoint=0xFF), min_size=1, max_size=20)
controls = st.text(st.characters(max_codepoint=0x1F), min_size=1, max_size=4)  # NUL, TAB, CR, LF …
surrogates = st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=4)
punctuation = st.lists(
    st.sampled_from([",", " ", "=", ";", ",,", "= ", " ,", "\t", "v1=", "t="]), min_size=1, max_size=6
).map("".join)
junk = st.one_of(
    latin1,
    surrogates,
    controls,
    punctuation,
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=30),
)
# How a genuine value is spoiled: replaced, spliced, emptied, made huge, repeated with commas.
Mutation = Callable[[str, str, int], str]
MUTATIONS: list[Mutation] = [
    lambda value, bad, at: bad,
    lambda value, bad, at: _spliced(value, bad, at),
    lambda value, bad, at: "",
    lambda value, bad, at: value * (1 + 64_000 // max(len(value), 1)),
    lambda value, bad, at: "A" * 100_000,
    lambda value, bad, at: f"{value},{bad}",
    lambda value, bad, at: f"{bad} {value}",
    lambda value, bad, at: value.replace("=", bad).replace(",", bad),
]
FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@FUZZ
@given(data=st.data(), bad=junk, at=st.integers(0, 200), mutation=st.sampled_from(range(len(MUTATIONS))))
def test_every_header_a_verifier_reads_survives_hostile_values(
    kinds_app: Flask, data: st.DataObject, bad: str, at: int, mutation: int
) -> None:
    """Finding 15, for every kind: a genuine delivery with one header it reads spoiled."""
    name = data.draw(st.sampled_from(NAMES))
    body, headers, path = delivery(kinds_app, name)
    header = data.draw(st.sampled_from(sorted({*headers, *READ.get(name, []), *COMMON})))
    current = next((v for k, v in headers.items() if k.lower() == header.lower()), "")
    headers = {k: v for k, v in headers.items() if k.lower() != header.lower()}
    before = rows(kinds_app, "SELECT count(*) FROM events")[0][0]
    status, answer = call(kinds_app, path, body, headers, {header: MUTATIONS[mutation](current, bad, at)})
    judged(kinds_app, status, answer, before)


FIXED: list[Callable[[str], str]] = [
    lambda v: "\xe9\xff\x80",
    lambda v: v + "\xff",
    lambda v: "\udcff" + v,
    lambda v: v[:1] + "\x00" + v[1:],
    lambda v: "",
    lambda v: " ,= ",
    lambda v: v.replace("=", " = ").replace(",", " ,, "),
    lambda v: "A" * 100_000,
]


def test_every_header_a_verifier_reads_with_each_hostile_value(kinds_app: Flask) -> None:
    """The sweep behind the fuzz: every kind × every header it reads × each fixed hostile value."""
    for name in NAMES:
        body, headers, path = delivery(kinds_app, name)
        for header in sorted({*headers, *READ.get(name, []), *COMMON}):
            current = next((v for k, v in headers.items() if k.lower() == header.lower()), "")
            rest = {k: v for k, v in headers.items() if k.lower() != header.lower()}
            for spoil in FIXED:
                before = rows(kinds_app, "SELECT count(*) FROM events")[0][0]
                status, answer = call(kinds_app, path, body, rest, {header: spoil(current)})
                judged(kinds_app, status, answer, before)


def test_a_provider_bug_on_hostile_input_is_one_log_line(
    kinds_app: Flask, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """What no provider should raise but might (the fuzz tests hunt these) is refused with one
    ERROR line naming the class; its traceback is logged only at debug."""
    from webhooks.providers.adyen import Adyen

    def broken(*_: Any, **__: Any) -> Any:
        raise KeyError("hostile")

    monkeypatch.setattr(Adyen, "verify", broken)
    body, headers, path = delivery(kinds_app, "adyen")
    caplog.set_level(logging.INFO, logger="webhooks")
    status, answer = call(kinds_app, path, body, headers, {})
    assert (status, json.loads(answer)) == (400, {"error": "malformed_payload"})
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in errors] == ["verify of endpoint 'adyen' raised KeyError"]
    assert not any(r.exc_info for r in caplog.records) and "Traceback" not in caplog.text
    caplog.clear()
    caplog.set_level(logging.DEBUG, logger="webhooks")
    call(kinds_app, path, body, headers, {})
    assert any(r.exc_info and r.levelno == logging.DEBUG for r in caplog.records)
