"""Twilio: T1/T3/T4 vectors, RequestValidator oracle both ways, URLs and ports, failures, rotation."""

from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlencode

import pytest
from twilio.request_validator import RequestValidator

from webhooks.configuration.settings import load
from webhooks.errors import ConfigError, VerificationError
from webhooks.providers.base import Endpoint, Request
from webhooks.providers.twilio import Twilio, json_url

PAYLOADS = Path(__file__).parents[1] / "payloads" / "twilio"
PROVIDER = Twilio()
TOKEN = "12345"
URL = "https://mycompany.com/myapp.php?foo=1&bar=2"
PUBLIC = "https://mycompany.com/myapp.php"
NOW = 1_700_000_000
T1_PARAMS = [
    ("CallSid", "CA1234567890ABCDE"),
    ("Caller", "+14158675309"),
    ("Digits", "1234"),
    ("From", "+14158675309"),
    ("To", "+18005551212"),
]
T4_BODY = b'{"property": "value", "boolean": true}'
T4_HASH = "0a1ff7634d9ab3b95db5c9a2dfe9416e41502b283a80c7cf19632632f96e6620"


class MultiDict(dict[str, list[str]]):
    """What RequestValidator expects of a form: ``getlist`` (as Django's QueryDict)."""

    def getlist(self, name: str) -> list[str]:
        return self[name]


def endpoint(*secrets: str, **options: str) -> Endpoint:
    return Endpoint("tw", "twilio", secrets or (TOKEN,), options={"public_url": PUBLIC, **options})


def signed(body: bytes, *, secret: str = TOKEN, url: str = URL, arrive: str | None = None, **extra: str) -> Request:
    """The one correct signing helper every negative case starts from (``arrive``: the URL we see)."""
    _, headers = PROVIDER.sign(Endpoint("tw", "twilio", (secret,)), body, now=NOW, url=url)  # signs ``url`` as is
    return Request({k.lower(): v for k, v in {**headers, **extra}.items() if v}, body, url=arrive or url)


def vector(body: bytes, signature: str, url: str = URL) -> Request:
    return Request({"x-twilio-signature": signature}, body, url=url)


def test_t1_form() -> None:
    event = PROVIDER.verify(
        vector(urlencode(T1_PARAMS).encode(), "RSOYDt4T1cUTdK1PDd93/VVr8B8="), endpoint(), now=NOW
    ).events[0]
    assert (event.event_type, event.secret_index) == ("request", 0)
    body = urlencode(T1_PARAMS).encode()
    assert event.event_id == "sha256:" + hashlib.sha256(URL.encode() + b"\n" + body).hexdigest()


def test_t3_repeated_keys() -> None:
    body = b"Sid=CA123&SidAccount=AC123&Digits=5678&Digits=1234"
    PROVIDER.verify(vector(body, "IK+Dwps556ElfBT0I3Rgjkr1wJU="), endpoint(), now=NOW)
    assert PROVIDER.event_data(body, None) == {"Sid": "CA123", "SidAccount": "AC123", "Digits": ["5678", "1234"]}


def test_t4_json() -> None:
    body = (PAYLOADS / "json__t4.json").read_bytes()
    assert body == T4_BODY and json_url(URL, body) == f"{URL}&bodySHA256={T4_HASH}"
    result = PROVIDER.verify(vector(body, "a9nBmqA0ju/hNViExpshrM61xv4=", json_url(URL, body)), endpoint(), now=NOW)
    assert result.events[0].event_type == "request"
    assert PROVIDER.event_data(body, None) == {"property": "value", "boolean": True}


@pytest.mark.parametrize(
    ("name", "event_type"),
    [
        ("message_status__delivered.txt", "message.delivered"),
        ("incoming_message__sms.txt", "message.received"),
        ("call_status__completed.txt", "call.completed"),
    ],
)
def test_payload_files(name: str, event_type: str) -> None:
    body = (PAYLOADS / name).read_bytes()
    event = PROVIDER.verify(signed(body), endpoint(), now=NOW).events[0]
    assert event.event_type == event_type
    assert event.event_id == signed(body).header("I-Twilio-Idempotency-Token")


@pytest.mark.parametrize("name", ["message_status__delivered.txt", "incoming_message__sms.txt", "json__t4.json"])
@pytest.mark.parametrize("algorithm", ["HMAC_SHA1", "HMAC_SHA256"])
def test_sdk_oracle_both_ways(name: str, algorithm: str) -> None:
    body = (PAYLOADS / name).read_bytes()
    is_json = name.endswith(".json")
    url = json_url(URL, body) if is_json else URL
    params: object = body.decode() if is_json else MultiDict(parse_qs(body.decode(), keep_blank_values=True))
    validator = RequestValidator(TOKEN)
    key_id = {"shared_key_id": "webhooks_sharedkey_01"} if algorithm == "HMAC_SHA256" else {}
    settings = {"x-twilio-webhooks-signature-settings": f"key=webhooks_sharedkey_01,algorithm={algorithm}"}
    signature = validator.compute_signature(url, {} if is_json else params, algorithm)
    headers = {"x-twilio-signature": signature, **(settings if key_id else {})}
    PROVIDER.verify(Request(headers, body, url=url), endpoint(), now=NOW)
    _, ours = PROVIDER.sign(endpoint(TOKEN, **key_id), body, now=NOW, url=url)
    assert validator.validate(url, params, ours["X-Twilio-Signature"], algorithm)


@pytest.mark.parametrize(
    ("signed_url", "public"),
    [
        ("https://mycompany.com/myapp.php?foo=1", "https://mycompany.com:443/myapp.php"),
        ("https://mycompany.com:443/myapp.php?foo=1", "https://mycompany.com/myapp.php"),
        ("https://mycompany.com/myapp.php?foo=1", "https://mycompany.com:8443/myapp.php"),
        ("http://mycompany.com:80/myapp.php?foo=1", "http://mycompany.com/myapp.php"),
    ],
)
def test_port_either_way(signed_url: str, public: str) -> None:
    """As twilio-python's validate: the URL with its port removed, or with the default port added."""
    body = (PAYLOADS / "message_status__delivered.txt").read_bytes()
    PROVIDER.verify(signed(body, url=signed_url), endpoint(public_url=public), now=NOW)


def test_a_port_is_not_a_wildcard() -> None:
    body = (PAYLOADS / "message_status__delivered.txt").read_bytes()
    req = signed(body, url="https://mycompany.com:8443/myapp.php?foo=1", arrive="http://10.0.0.7:8000/t?foo=1")
    with pytest.raises(VerificationError) as exc:
        PROVIDER.verify(req, endpoint(public_url="https://mycompany.com:9443/myapp.php"), now=NOW)
    assert exc.value.reason == "signature_mismatch"


def test_public_url_behind_a_proxy() -> None:
    body = (PAYLOADS / "message_status__delivered.txt").read_bytes()
    req = signed(body, url=URL, arrive="http://10.0.0.7:8000/twilio?foo=1&bar=2")
    PROVIDER.verify(req, endpoint(public_url="https://mycompany.com/myapp.php"), now=NOW)


def test_never_falls_back_to_the_clients_host() -> None:
    """Without public_url the request's Host would decide the URL: a signature made for any other
    host of the same account would verify. Start-up refuses that, and so does verify."""
    body = (PAYLOADS / "message_status__delivered.txt").read_bytes()
    req = signed(body, url="https://other-app.example/hook?foo=1", arrive="https://other-app.example/hook?foo=1")
    bare = Endpoint("tw", "twilio", (TOKEN,))
    with pytest.raises(ConfigError, match=r"'tw'.*public_url"):
        PROVIDER.validate(bare)
    with pytest.raises(VerificationError) as exc:
        PROVIDER.verify(req, bare, now=NOW)
    assert exc.value.reason == "url_mismatch"
    with pytest.raises(VerificationError):
        PROVIDER.verify(req, endpoint(), now=NOW)


def test_wrong_public_url_is_url_mismatch() -> None:
    req = signed((PAYLOADS / "message_status__delivered.txt").read_bytes())
    with pytest.raises(VerificationError) as exc:
        PROVIDER.verify(req, endpoint(public_url="https://mycompany.com/other.php"), now=NOW)
    assert exc.value.reason == "url_mismatch"


def test_rotation_auth_token_and_shared_key() -> None:
    body = (PAYLOADS / "incoming_message__sms.txt").read_bytes()
    for index, secret in enumerate(("old-token", "new-token")):
        event = PROVIDER.verify(signed(body, secret=secret), endpoint("old-token", "new-token"), now=NOW).events[0]
        assert event.secret_index == index


BODY = (PAYLOADS / "message_status__delivered.txt").read_bytes()
JSON_URL = json_url(URL, T4_BODY)


@pytest.mark.parametrize(
    ("req", "reason"),
    [
        (signed(BODY, **{"X-Twilio-Signature": ""}), "missing_signature"),
        (signed(BODY, **{"X-Twilio-Signature": "***"}), "malformed_signature"),
        (signed(BODY, **{"X-Twilio-Webhooks-Signature-Settings": "key=k,algorithm=HMAC_MD5"}), "malformed_signature"),
        # A SHA-1 signature under a SHA-256 setting has the wrong size: refused before the body is parsed.
        (
            signed(BODY, **{"X-Twilio-Webhooks-Signature-Settings": "key=k,algorithm=HMAC_SHA256"}),
            "malformed_signature",
        ),
        (Request(signed(BODY).headers, BODY.replace(b"delivered", b"failed"), url=URL), "signature_mismatch"),
        (signed(BODY, arrive=URL + "&extra=1"), "signature_mismatch"),
        (Request(signed(T4_BODY, url=JSON_URL).headers, T4_BODY + b" ", url=JSON_URL), "signature_mismatch"),
    ],
    ids=[
        "missing",
        "not-base64",
        "unknown-algorithm",
        "algorithm-switched",
        "param-changed",
        "url-changed",
        "json-body-changed",
    ],
)
def test_failures(req: Request, reason: str) -> None:
    with pytest.raises(VerificationError) as exc:
        PROVIDER.verify(req, endpoint(), now=NOW)
    assert exc.value.reason == reason


def test_sign_json_needs_body_hash_in_url() -> None:
    with pytest.raises(ValueError, match="bodySHA256"):
        PROVIDER.sign(endpoint(), T4_BODY, now=NOW, url=URL)


def test_validate_public_url() -> None:
    with pytest.raises(ConfigError, match="'tw'"):
        PROVIDER.validate(endpoint(public_url="mycompany.com/myapp.php"))


# -- twilio-python's own cases (tests/unit/test_request_validator.py) and raw query strings ------

T1_DICT = MultiDict({name: [value] for name, value in T1_PARAMS})


@pytest.mark.parametrize(
    ("public", "signature"),
    [
        ("https://mycompany.com:1234/myapp.php", "RSOYDt4T1cUTdK1PDd93/VVr8B8="),  # removes port on https
        ("http://mycompany.com:1234/myapp.php", "Zmvh+3yNM1Phv2jhDCwEM3q5ebU="),  # removes port on http (kept)
        ("https://mycompany.com/myapp.php", "kvajT1Ptam85bY51eRf/AJRuM3w="),  # adds port 443
        ("http://mycompany.com/myapp.php", "0ZXoZLH/DfblKGATFgpif+LLRf4="),  # adds port 80
    ],
)
def test_twilio_python_port_vectors(public: str, signature: str) -> None:
    body = urlencode(T1_PARAMS).encode()
    arrive = "http://10.0.0.7:8000/hook?foo=1&bar=2"
    assert RequestValidator(TOKEN).validate(public + "?foo=1&bar=2", T1_DICT, signature)
    PROVIDER.verify(vector(body, signature, arrive), endpoint(public_url=public), now=NOW)


@pytest.mark.parametrize(
    "query",
    [
        "name=O%27Brien",
        "path=a%2Fb",
        "time=10%3A30",
        "to=user%40example.com",
        "city=Montr%C3%A9al",
        "q=%27%2F%3A%40%C3%A9&bar=2",
        "plus=a+b&pct=100%25",
    ],
)
def test_query_string_verified_as_sent(query: str) -> None:
    """The signed URL keeps the query's escapes exactly: decoding (as Werkzeug's request.url does) or
    re-encoding it breaks genuine deliveries. SDK oracle: RequestValidator over the raw URL."""
    body = urlencode(T1_PARAMS).encode()
    raw = f"{PUBLIC}?{query}"
    signature = RequestValidator(TOKEN).compute_signature(raw, T1_DICT)
    event = PROVIDER.verify(vector(body, signature, f"http://10.0.0.7:8000/hook?{query}"), endpoint(), now=NOW)
    assert event.events[0].secret_index == 0
    decoded = f"http://10.0.0.7:8000/hook?{unquote(query)}"
    if decoded != f"http://10.0.0.7:8000/hook?{query}":
        with pytest.raises(VerificationError):
            PROVIDER.verify(vector(body, signature, decoded), endpoint(), now=NOW)


def test_replay_key_names_the_signature_not_its_unsigned_parts() -> None:
    """Moved parameter boundaries and a new idempotency token verify with the same signature: the
    replay key is the same, so the receiver stores one event."""
    body = b"MessageSid=SM1&MessageStatus=delivered"
    genuine = signed(body)
    first = PROVIDER.verify(genuine, endpoint(), now=NOW)
    moved = Request(genuine.headers, b"MessageSid=SM1MessageStatusdelivered", url=genuine.url)
    retoken = Request({**genuine.headers, "i-twilio-idempotency-token": "attacker-chosen"}, body, url=genuine.url)
    others = [PROVIDER.verify(r, endpoint(), now=NOW) for r in (moved, retoken)]
    assert first.replay_key and all(o.replay_key == first.replay_key for o in others)
    assert {o.events[0].event_id for o in (first, *others)} != {first.events[0].event_id}  # the attack is real
    assert (
        PROVIDER.verify(signed(b"MessageSid=SM2&MessageStatus=delivered"), endpoint(), now=NOW).replay_key
        != first.replay_key
    )


def test_shorthand_variables_and_start_up_refusal() -> None:
    settings = load({"TWILIO_AUTH_TOKEN": TOKEN, "TWILIO_PUBLIC_URL": PUBLIC})
    assert settings.endpoints["twilio"].options["public_url"] == PUBLIC
    with pytest.raises(ConfigError, match=r"'twilio'.*public_url"):
        load({"TWILIO_AUTH_TOKEN": TOKEN})
