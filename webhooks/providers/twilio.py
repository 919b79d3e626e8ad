"""Twilio: ``X-Twilio-Signature: <base64>``.

Signed string: the full URL Twilio called, then each POST parameter sorted by name, name then
value (a repeated name: each distinct value, sorted — as twilio-python does). JSON bodies: the URL
carries ``bodySHA256=<hex sha256(body)>``, no parameters are appended, and the hash must match.
Key: HMAC-SHA1 with the account Auth Token (UTF-8). When a Webhook Rule applies a SharedKey,
Twilio adds ``X-Twilio-Webhooks-Signature-Settings: key=<sharedKeyId>,algorithm=HMAC_SHA256``
and signs the same string with that key and algorithm. We take only ``algorithm`` from that
(unsigned) header and try every configured secret, so ``secrets`` may hold Auth Tokens and
SharedKey secrets together; an unknown algorithm is ``malformed_signature``.
URL: ``options["public_url"]`` (required: scheme, host, path, the URL Twilio was given) with the
raw query string of ``request.url`` (the request URI as sent, escapes intact: never decoded or
re-encoded); the client's ``Host`` is never trusted. As twilio-python and twilio-node, the URL is
tried with and without its port (any port; none → the scheme's default added). If only
``request.url`` verifies, the configured ``public_url`` is wrong: ``url_mismatch``.
Event id: ``I-Twilio-Idempotency-Token``, else ``sha256:<hex of url + "\\n" + body>``. Type:
``message.<MessageStatus|SmsStatus>``, ``call.<CallStatus>``, else ``request``.
Cheapest checks first: the signature must be base64 of a digest of the algorithm's size (20 bytes
SHA-1, 32 SHA-256) and a form of more than ``MAX_PARAMETERS`` (1000) parameters is
``too_many_parameters``, both before the body is parsed or sorted.
Neither the token nor the parameter boundaries are signed (``a=b1&c=d`` and ``a=b1cd`` sign alike):
the replay key is a hash of the verified signature, so one signature yields one event.
Docs: https://www.twilio.com/docs/usage/webhooks/webhooks-security
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlsplit, urlunsplit

from webhooks.errors import ConfigError, PayloadError, VerificationError
from webhooks.providers.base import (
    DAY,
    Endpoint,
    Provider,
    Request,
    Verified,
    VerifiedEvent,
    b64decode,
    content_id,
    hmac_digest,
    looks_like_json,
    parse_json,
    replay_key,
    require,
)
from webhooks.vocabulary import Reason

SETTINGS = "X-Twilio-Webhooks-Signature-Settings"
ALGORITHMS = {"HMAC_SHA1": "sha1", "HMAC_SHA256": "sha256"}
DEFAULT_PORTS = {"https": 443, "http": 80}
DIGEST_SIZES = {"sha1": 20, "sha256": 32}
MAX_PARAMETERS = 1000  # Twilio's callbacks carry a few dozen; a flood would be parsed and sorted in full
STATUS = (("MessageStatus", "message"), ("SmsStatus", "message"), ("CallStatus", "call"))


def algorithm(settings: str | None) -> str:
    """The hashlib name the settings header asks for; no header (or no ``algorithm=``) is SHA-1."""
    for part in (settings or "").split(","):
        name, sep, value = part.partition("=")
        if sep and name.strip() == "algorithm" and value.strip():
            if value.strip().upper() not in ALGORITHMS:
                raise VerificationError(Reason.MALFORMED_SIGNATURE, f"unsupported algorithm {value.strip()!r}")
            return ALGORITHMS[value.strip().upper()]
    return "sha1"


def parse_form(body: bytes) -> dict[str, list[str]]:
    try:
        return parse_qs(body.decode("utf-8"), keep_blank_values=True)
    except UnicodeDecodeError as exc:
        raise PayloadError("form body is not UTF-8") from exc


def signed_string(url: str, params: dict[str, list[str]]) -> bytes:
    return url.encode() + signed_params(params)


def signed_params(params: dict[str, list[str]]) -> bytes:
    """The parameters' part of the signed string (sorted once, whatever the number of URLs tried)."""
    return "".join(n + v for n in sorted(params) for v in sorted(set(params[n]))).encode()


def count_parameters(body: bytes) -> None:
    """Refuse a form of more than ``MAX_PARAMETERS`` parameters, counting separators only."""
    if body.count(b"&") >= MAX_PARAMETERS:
        raise VerificationError(Reason.TOO_MANY_PARAMETERS, f"form has more than {MAX_PARAMETERS} parameters")


def port_variants(url: str) -> list[str]:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:  # the Host header is the client's: "host:abc", "[::1"
        raise VerificationError(Reason.URL_MISMATCH, "request URL does not parse") from exc
    default = DEFAULT_PORTS.get(parts.scheme)
    if port is not None:  # any port, as twilio-python's remove_port
        return [url, urlunsplit(parts._replace(netloc=parts.netloc.rsplit(":", 1)[0]))]
    if default:
        return [url, urlunsplit(parts._replace(netloc=f"{parts.netloc}:{default}"))]
    return [url]


def json_url(url: str, body: bytes) -> str:
    """``url`` with the ``bodySHA256`` Twilio adds for a JSON body."""
    return f"{url}{'&' if urlsplit(url).query else '?'}bodySHA256={hashlib.sha256(body).hexdigest()}"


def _signed_url(request: Request, endpoint: Endpoint) -> str:
    public = endpoint.options.get("public_url")
    if not public:  # validate() refuses this; never fall back to the client's Host
        raise VerificationError(Reason.URL_MISMATCH, f"endpoint {endpoint.name!r} has no options.public_url")
    p = urlsplit(str(public))
    try:
        query = urlsplit(request.url).query
    except ValueError as exc:
        raise VerificationError(Reason.URL_MISMATCH, "request URL does not parse") from exc
    return urlunsplit((p.scheme, p.netloc, p.path, query or p.query, ""))


def _match(secrets: tuple[str, ...], url: str, tail: bytes, alg: str, sig: bytes) -> int | None:
    for index, secret in enumerate(secrets):
        digests = [hmac_digest(secret.encode(), u.encode() + tail, alg) for u in port_variants(url)]
        if sum(hmac.compare_digest(d, sig) for d in digests):
            return index
    return None


class Twilio(Provider):
    kind = "twilio"
    signs_url = True  # the URL it calls is signed
    retry_horizon = DAY  # product-dependent, documented in hours: a day is conservative
    shorthands = {"TWILIO_AUTH_TOKEN": "secrets", "TWILIO_PUBLIC_URL": "public_url"}
    option_names = frozenset({"public_url", "shared_key_id"})
    signature_header_names = ("X-Twilio-Signature",)

    def validate(self, endpoint: Endpoint) -> None:
        super().validate(endpoint)
        public = endpoint.options.get("public_url")
        if not public:
            raise ConfigError(
                f"endpoint {endpoint.name!r}: public_url (the URL Twilio calls) is required: the request's "
                "Host header is the client's"
            )
        try:
            p = urlsplit(str(public))
            p.port  # noqa: B018 -- raises on a port that is not a number
        except ValueError as exc:
            raise ConfigError(f"endpoint {endpoint.name!r}: public_url does not parse") from exc
        if p.scheme not in DEFAULT_PORTS or not p.hostname or p.fragment:
            raise ConfigError(f"endpoint {endpoint.name!r}: public_url must be an absolute http(s) URL")

    def verify(self, request: Request, endpoint: Endpoint, *, now: float) -> Verified:
        signature = b64decode(require(request, "X-Twilio-Signature"))
        alg = algorithm(request.header(SETTINGS))
        if len(signature) != DIGEST_SIZES[alg]:  # before the body is touched: no MAC has another size
            raise VerificationError(Reason.MALFORMED_SIGNATURE, f"X-Twilio-Signature is not a {alg} digest")
        url = _signed_url(request, endpoint)
        port_variants(url)  # refuses a URL that does not parse, before anything else splits it
        body_hash = parse_qs(urlsplit(url).query).get("bodySHA256")
        if not body_hash:
            count_parameters(request.body)
        params = {} if body_hash else parse_form(request.body)
        tail = signed_params(params)
        index = _match(endpoint.secrets, url, tail, alg, signature)
        if index is None:
            elsewhere = request.url and url != request.url
            if elsewhere and _match(endpoint.secrets, request.url, tail, alg, signature) is not None:
                raise VerificationError(Reason.URL_MISMATCH, "request.url verifies but options.public_url does not")
            raise VerificationError(Reason.SIGNATURE_MISMATCH, "no configured secret matches")
        if body_hash and not hmac.compare_digest(hashlib.sha256(request.body).hexdigest(), body_hash[0].lower()):
            raise VerificationError(Reason.SIGNATURE_MISMATCH, "body does not match bodySHA256")
        event_id = request.header("I-Twilio-Idempotency-Token")
        if not event_id:
            event_id = content_id(url.encode() + b"\n" + request.body)
        event_type = next((f"{kind}.{params[name][0]}" for name, kind in STATUS if params.get(name)), "request")
        scheme = "twilio-sharedkey" if request.header(SETTINGS) else "twilio-authtoken"
        return Verified(
            [VerifiedEvent(event_id.strip(), event_type, secret_index=index)],
            f"{scheme}-{alg}",
            replay_key=replay_key("twilio", signature),
        )

    def event_data(self, payload: bytes, index: int | None) -> Any:
        if looks_like_json(payload):
            return parse_json(payload)
        return {k: v[0] if len(v) == 1 else v for k, v in parse_form(payload).items()}

    def post_url(self, url: str, body: bytes) -> str:
        is_json = looks_like_json(body)
        return json_url(url, body) if is_json and "bodySHA256=" not in url else url

    def sign(
        self, endpoint: Endpoint, body: bytes, *, now: float, secret_index: int = 0, url: str = ""
    ) -> tuple[bytes, dict[str, str]]:
        public = str(endpoint.options.get("public_url") or "")
        if public and url:  # sent to a local address, signed for the public one (as Twilio would)
            p = urlsplit(public)
            url = urlunsplit((p.scheme, p.netloc, p.path, urlsplit(url).query or p.query, ""))
        url = url or public
        if not url:
            raise ValueError("twilio signs the URL: pass url= or configure options.public_url")
        is_json = looks_like_json(body)
        if is_json and "bodySHA256" not in dict(parse_qsl(urlsplit(url).query)):
            raise ValueError("a JSON body is signed with bodySHA256 in the URL: post to twilio.json_url(url, body)")
        key_id = endpoint.options.get("shared_key_id")
        alg = "sha256" if key_id else "sha1"
        signed = signed_string(url, {} if is_json else parse_form(body))
        mac = hmac_digest(endpoint.secrets[secret_index].encode(), signed, alg)
        headers = {
            "X-Twilio-Signature": base64.b64encode(mac).decode(),
            "I-Twilio-Idempotency-Token": hashlib.sha256(str(int(now)).encode() + body).hexdigest()[:32],
            "Content-Type": "application/json" if is_json else "application/x-www-form-urlencoded",
        }
        if key_id:
            headers[SETTINGS] = f"key={key_id},algorithm=HMAC_SHA256"
        return body, headers
