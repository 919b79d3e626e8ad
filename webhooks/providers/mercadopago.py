"""Mercado Pago: ``x-signature: ts=<ts>,v1=<hex>`` and ``x-request-id``; the body is not signed.

Signed string (the "manifest"): ``f"id:{data_id};request-id:{x_request_id};ts:{ts};"``; HMAC-SHA256
keyed with the application's secret signature as UTF-8; lower-case hex in ``v1`` (several ``v1``
are tried, at most ``MAX_SIGNATURES``). ``data_id`` is the body's ``data.id`` as received; the URL's
``data.id`` query parameter (Mercado Pago adds ``?data.id=…&type=…`` to the notification URL), the
one the SDK signs, must be the same (else ``malformed_payload``). ``x-request-id`` is required
(``missing_signature`` without it: the SDK would drop it from the manifest, leaving nothing unique
signed). ``ts`` (unix seconds; 13 digits or more: milliseconds) must lie within
``tolerance_seconds`` of ``now`` both ways.
Nothing in the body is signed (not its ``type``, ``action``, ``id`` or ``live_mode``), so nothing
in it is acted on: the worker acts only on the payment fetched from Mercado Pago's API with the
endpoint's ``access_token`` (``GET /v1/payments/<data.id>``, ``mercadopago_api``), which
``validate`` requires (fail closed). Only payment notifications are taken (body and query ``type``
``payment``, else ``malformed_payload``). Event id: ``<data.id>:<x-request-id>``, both signed, so
one signature is at most one event (no replay key needed); type ``payment.changed``; object: the
fetched payment, versioned by the fetch time (``api.fresh_version``); its status is the fetched
``status``.
Docs: https://www.mercadopago.com/developers/en/docs/your-integrations/notifications/webhooks
"""

from __future__ import annotations

import hashlib
import re
import uuid
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from webhooks.errors import ConfigError, PayloadError, VerificationError
from webhooks.providers.base import (
    Endpoint,
    ObjectRef,
    Provider,
    Request,
    Verified,
    VerifiedEvent,
    capped_split,
    check_timestamp,
    first_match,
    hmac_digest,
    parse_json,
    require,
)
from webhooks.providers.fields import time_text
from webhooks.vocabulary import Reason

SIGNATURE, REQUEST_ID = "x-signature", "x-request-id"
TYPE = "payment.changed"
DATA_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
ACCESS_TOKEN = re.compile(r"(APP_USR|TEST)-[A-Za-z0-9-]{16,256}")


def manifest(data_id: str, request_id: str, ts: str) -> bytes:
    return f"id:{data_id};request-id:{request_id};ts:{ts};".encode()


def parse_signature(value: str) -> tuple[str, list[bytes]]:
    """``ts=…,v1=…`` → (ts, the ``v1`` digests); unknown entries are ignored, as the SDK does."""
    ts, digests = None, []
    for part in capped_split(value, ",", SIGNATURE):
        key, _, entry = (p.strip() for p in part.partition("="))
        if key.lower() == "ts" and entry:
            ts = entry
        elif key.lower() == "v1" and entry:
            try:
                digests.append(bytes.fromhex(entry))
            except ValueError:
                continue  # an unusable entry never matches
    if ts is None or not ts.isdigit():
        raise VerificationError(Reason.MALFORMED_SIGNATURE, f"{SIGNATURE} has no ts=<digits>")
    return ts, digests


def _seconds(ts: str) -> str:
    return ts[:-3] if len(ts) >= 13 else ts


def data_id(request: Request, body: Any) -> str:
    """The notification's ``data.id``: the body's, which the query's (if any) must equal; the worker
    fetches the payment by the body's, so that is the one the signature must cover."""
    query = parse_qs(urlsplit(request.url).query).get("data.id", [])
    inner = body.get("data") if isinstance(body, dict) else None
    sent = inner.get("id") if isinstance(inner, dict) else None
    if not isinstance(sent, str | int) or isinstance(sent, bool) or not DATA_ID.fullmatch(value := str(sent)):
        raise PayloadError("the body has no data.id")
    if any(q != value for q in query):
        raise PayloadError("the query's data.id is not the body's")
    return value


def _payment_topic(request: Request, body: dict[str, Any]) -> None:
    topics = {body.get("type"), *parse_qs(urlsplit(request.url).query).get("type", ["payment"])}
    if topics != {"payment"}:
        raise PayloadError("only payment notifications are taken (type must be payment)")


class MercadoPago(Provider):
    kind = "mercadopago"
    # Retried every 15 minutes until answered; assume the longest, the default 30 days.
    option_names = frozenset({"access_token", "api_base"})
    shorthands = {"MERCADOPAGO_WEBHOOK_SECRET": "secrets", "MERCADOPAGO_ACCESS_TOKEN": "access_token"}
    signature_header_names = (SIGNATURE,)

    def validate(self, endpoint: Endpoint) -> None:
        super().validate(endpoint)
        name, token = endpoint.name, endpoint.options.get("access_token")
        if not (isinstance(token, str) and ACCESS_TOKEN.fullmatch(token)):
            raise ConfigError(
                f"endpoint {name!r}: access_token (APP_USR-… or TEST-…) is required: Mercado Pago does not sign "
                "the body, every payment is fetched from its API (fail closed)"
            )
        if "api_base" in endpoint.options:
            from webhooks.providers import api  # no I/O: only its host check

            api.check_base(name, endpoint.options["api_base"], "api.mercadopago.com")

    def verify(self, request: Request, endpoint: Endpoint, *, now: float) -> Verified:
        ts, digests = parse_signature(require(request, SIGNATURE))
        request_id = require(request, REQUEST_ID)
        signed_at = check_timestamp(_seconds(ts), now, endpoint.tolerance_seconds)
        body = parse_json(request.body)
        if not isinstance(body, dict):
            raise PayloadError("body is not a notification object")
        payment = data_id(request, body)
        message = manifest(payment, request_id, ts)
        index = first_match(endpoint.secrets, lambda s: hmac_digest(s.encode(), message), digests)
        _payment_topic(request, body)
        event = VerifiedEvent(
            f"{payment}:{request_id}", TYPE, secret_index=index, signed_at=signed_at, object_id=payment
        )
        return Verified([event], "mercadopago-sha256")

    def extract(self, event_type: str, data: Any) -> ObjectRef | None:
        return None  # nothing delivered is an object's state: ``refetch`` gives it

    def refetch(
        self, endpoint: Endpoint, event_type: str, data: Any, ref: ObjectRef | None
    ) -> tuple[Any, ObjectRef | None]:
        """Only Mercado Pago's own copy of the payment is acted on, never the unsigned body."""
        from webhooks.providers import api, mercadopago_api  # the API client is worker-side I/O, loaded only here

        inner = data.get("data") if isinstance(data, dict) else None
        payment = mercadopago_api.payment(endpoint, str(inner.get("id", "")) if isinstance(inner, dict) else "")
        return payment, ObjectRef("payment", str(payment["id"]), api.fresh_version(), payment)

    def calls_out(self, endpoint: Endpoint) -> bool:
        return True

    def describe_version(self, version: int) -> str | None:
        at = time_text(version // 10) if version > 0 else None  # 0.1 ms (``api.fresh_version``)
        return f"fetched from Mercado Pago {at}" if at else None

    def post_url(self, url: str, body: bytes) -> str:
        """The notification URL as Mercado Pago calls it: with ``data.id`` and ``type`` appended."""
        if "data.id=" in url:
            return url
        try:
            parsed = parse_json(body)
            inner = parsed["data"]["id"]
            topic = parsed["type"]
        except (PayloadError, KeyError, TypeError):
            return url
        return f"{url}{'&' if '?' in url else '?'}{urlencode({'data.id': inner, 'type': topic})}"

    def sign(
        self, endpoint: Endpoint, body: bytes, *, now: float, secret_index: int = 0, url: str = ""
    ) -> tuple[bytes, dict[str, str]]:
        try:
            payment = data_id(Request({}, body, url), parse_json(body))
        except PayloadError:  # sign it anyway (the tests' garbage): verify refuses it as malformed_payload
            payment = "".join(parse_qs(urlsplit(url).query).get("data.id", []))
        request_id = str(uuid.UUID(bytes=hashlib.sha256(str(int(now)).encode() + body).digest()[:16]))
        ts = str(int(now))
        mac = hmac_digest(endpoint.secrets[secret_index].encode(), manifest(payment, request_id, ts))
        return body, {
            "x-signature": f"ts={ts},v1={mac.hex()}",
            "x-request-id": request_id,
            "Content-Type": "application/json",
        }
