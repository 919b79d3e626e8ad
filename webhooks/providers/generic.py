"""Generic HMAC (kind ``hmac``), for providers without their own module; configured by options.

Signed bytes: ``template`` with ``{timestamp}`` (the ``timestamp_header`` value) and ``{body}``
(the raw body) filled in; default ``"{timestamp}.{body}"`` with a timestamp header, else
``"{body}"``. HMAC with ``algorithm`` (sha1, sha256, sha512; default sha256) keyed with the secret
as UTF-8, encoded ``hex`` (default) or ``base64``, in the header ``header`` after an optional
``prefix`` (e.g. ``"sha256="``). With a timestamp: unix seconds, ``tolerance_seconds`` both ways.
Event id: the ``id_header`` header, or the dotted JSON path ``id_path`` (``"data.id"``), else
``sha256:<hex of the body>``. Type: ``type_header`` or ``type_path``, else ``"event"``.
Headers named by ``id_header``/``type_header`` are not signed, and a timestamp may be absent: the
replay key is always a hash of the verified signature, so one signature yields one event.
Docs: the provider's own; e.g. https://webhooks.fyi/security/hmac
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import secrets
from typing import Any

from webhooks.errors import ConfigError, PayloadError, VerificationError
from webhooks.providers.base import (
    Endpoint,
    Provider,
    Request,
    Verified,
    VerifiedEvent,
    check_timestamp,
    content_id,
    first_match,
    hmac_digest,
    parse_json,
    replay_key,
    require,
)
from webhooks.vocabulary import Reason

ALGORITHMS = ("sha1", "sha256", "sha512")
ENCODINGS = ("hex", "base64")
KNOWN = {
    "header",
    "algorithm",
    "encoding",
    "prefix",
    "timestamp_header",
    "template",
    "id_header",
    "id_path",
    "type_header",
    "type_path",
}


def _template(options: Any) -> str:
    default = "{timestamp}.{body}" if options.get("timestamp_header") else "{body}"
    return str(options.get("template") or default)


def render(template: str, timestamp: str, body: bytes) -> bytes:
    # Split on {body} first, so a body that contains "{timestamp}" is never rewritten.
    return body.join(part.replace("{timestamp}", timestamp).encode() for part in template.split("{body}"))


def _dig(data: Any, path: str) -> Any:
    for key in path.split("."):
        data = data.get(key) if isinstance(data, dict) else None
    return data


def _decode(value: str, encoding: str) -> bytes:
    try:
        return bytes.fromhex(value) if encoding == "hex" else base64.b64decode(value, validate=True)
    except (ValueError, binascii.Error) as exc:
        raise VerificationError(Reason.MALFORMED_SIGNATURE, f"signature is not {encoding}") from exc


class GenericHmac(Provider):
    kind = "hmac"
    option_names = frozenset(KNOWN)

    def issue_secret(self) -> str:
        """64 hex characters: the key is the secret's UTF-8, 256 bits of it."""
        return secrets.token_hex(32)

    def validate(self, endpoint: Endpoint) -> None:
        super().validate(endpoint)
        o, name = endpoint.options, endpoint.name

        def bad(detail: str) -> ConfigError:
            return ConfigError(f"endpoint {name!r}: {detail}")

        if unknown := set(o) - KNOWN:
            raise bad(f"unknown hmac options {sorted(unknown)}")
        if not isinstance(o.get("header"), str) or not o["header"]:
            raise bad("options.header (the signature header) is required")
        if o.get("algorithm", "sha256") not in ALGORITHMS:
            raise bad(f"options.algorithm must be one of {ALGORITHMS}")
        if o.get("encoding", "hex") not in ENCODINGS:
            raise bad(f"options.encoding must be one of {ENCODINGS}")
        template = _template(o)
        if "{body}" not in template:
            raise bad("options.template must contain {body}")
        rest = template.replace("{body}", "").replace("{timestamp}", "")
        if "{" in rest or "}" in rest:
            raise bad("options.template knows only {timestamp} and {body}")
        if ("{timestamp}" in template) != bool(o.get("timestamp_header")):
            raise bad("options.template uses {timestamp} exactly when options.timestamp_header is set")
        if (o.get("id_header") and o.get("id_path")) or (o.get("type_header") and o.get("type_path")):
            raise bad("give id_header or id_path (type_header or type_path), not both")

    def signature_headers(self, endpoint: Endpoint) -> tuple[str, ...]:
        return (str(endpoint.options["header"]),)

    def verify(self, request: Request, endpoint: Endpoint, *, now: float) -> Verified:
        o = endpoint.options
        raw = require(request, o["header"])
        prefix = str(o.get("prefix", ""))
        if not raw.startswith(prefix):
            raise VerificationError(Reason.MALFORMED_SIGNATURE, f"{o['header']} does not start with {prefix!r}")
        signature = _decode(raw[len(prefix) :], str(o.get("encoding", "hex")))
        timestamp = require(request, o["timestamp_header"]) if o.get("timestamp_header") else ""
        # The window before the HMAC: a stale delivery costs no pass over its body.
        ts = check_timestamp(timestamp, now, endpoint.tolerance_seconds) if timestamp else None
        signed = render(_template(o), timestamp, request.body)
        algorithm = str(o.get("algorithm", "sha256"))
        index = first_match(endpoint.secrets, lambda s: hmac_digest(s.encode(), signed, algorithm), [signature])
        body = parse_json(request.body) if o.get("id_path") or o.get("type_path") else None
        event_id = self._field(request, body, o.get("id_header"), o.get("id_path"))
        if event_id is None:
            event_id = content_id(request.body)
        event_type = self._field(request, body, o.get("type_header"), o.get("type_path")) or "event"
        return Verified(
            [VerifiedEvent(event_id, event_type, secret_index=index, signed_at=ts)],
            f"hmac-{algorithm}",
            replay_key=replay_key(f"hmac-{algorithm}", signature),
        )

    @staticmethod
    def _field(request: Request, body: Any, header: str | None, path: str | None) -> str | None:
        if header:
            value = request.header(header)
            where = f"header {header}"
        elif path:
            value = _dig(body, path)
            where = f"body {path}"
        else:
            return None
        if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
            raise PayloadError(f"no {where}")
        return str(value).strip()

    def sign(
        self, endpoint: Endpoint, body: bytes, *, now: float, secret_index: int = 0, url: str = ""
    ) -> tuple[bytes, dict[str, str]]:
        o = endpoint.options
        timestamp = str(int(now)) if o.get("timestamp_header") else ""
        algorithm = str(o.get("algorithm", "sha256"))
        mac = hmac_digest(endpoint.secrets[secret_index].encode(), render(_template(o), timestamp, body), algorithm)
        value = mac.hex() if o.get("encoding", "hex") == "hex" else base64.b64encode(mac).decode()
        headers = {o["header"]: str(o.get("prefix", "")) + value, "Content-Type": "application/json"}
        if timestamp:
            headers[o["timestamp_header"]] = timestamp
        if o.get("id_header"):
            headers[o["id_header"]] = hashlib.sha256(timestamp.encode() + body).hexdigest()[:32]
        if o.get("type_header"):
            headers[o["type_header"]] = "event"
        return body, headers
