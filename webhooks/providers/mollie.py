"""Mollie: classic webhooks sign nothing; next-gen webhooks send ``X-Mollie-Signature``.

Classic (an endpoint with no ``secrets``): Mollie posts a form, ``id=tr_…``, whenever a payment
changes; nothing is signed and anyone can post it. The body is never acted on: it only names a
payment (``tr_`` and letters or digits, else ``malformed_payload``), and the worker acts on the
payment fetched from Mollie's API with the endpoint's ``api_key`` (``GET /v2/payments/<id>``,
``mollie_api``), so ``validate`` refuses a classic endpoint without one (fail closed: there is
nothing else to verify against; ``signs_nothing``: default rate limits). A payment Mollie does not
have ends the event ``ignored`` (``unknown_object``), and is not asked for again for a minute. The
delivery carries no event id, type or version: the id is ``<payment id>@<minute of arrival>``
(``CLASSIC_WINDOW``: duplicates within it are one event; a later nudge is a new event that fetches
the then-current state), the type ``payment.changed``, the object the fetched payment, versioned by
the fetch time (``api.fresh_version``), its status in the fetched ``status``.
Signed (``secrets`` set): ``X-Mollie-Signature: sha256=<hex>`` (bare hex accepted), HMAC-SHA256 of
the raw body keyed with the webhook's signing secret as UTF-8; an unsigned delivery is then
``missing_signature``. No timestamp is signed, but the event's ``id`` (``event_…``) is: a replay is
a duplicate (no replay key needed). Type: ``type`` (``payment-link.paid``); object: the embedded
entity's ``resource`` (else the type's prefix) and ``entityId``; version: ``createdAt`` in ms.
Docs: https://docs.mollie.com/reference/webhooks, https://docs.mollie.com/reference/best-practices
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs

from webhooks.errors import ConfigError, PayloadError, VerificationError
from webhooks.providers.base import (
    DAY,
    Endpoint,
    ObjectRef,
    Provider,
    Request,
    Verified,
    VerifiedEvent,
    first_match,
    hmac_digest,
    looks_like_json,
    parse_json,
)
from webhooks.providers.fields import iso_ms, time_text
from webhooks.vocabulary import Reason

SIGNATURE = "X-Mollie-Signature"
CLASSIC_TYPE = "payment.changed"
CLASSIC_WINDOW = 60  # seconds: classic nudges of one payment within one window are one event
PAYMENT_ID = re.compile(r"tr_[A-Za-z0-9]{1,64}")
FETCHED = 10**13  # versions from here up are fetch times in 0.1 ms; below, createdAt in ms (until 2286)
API_KEY = re.compile(r"(live|test)_[A-Za-z0-9]{20,64}|access_[A-Za-z0-9_.-]{20,512}")


def classic_id(body: bytes) -> str:
    """The payment a classic form body names, or ``PayloadError``."""
    try:
        form = parse_qs(body.decode("ascii"), keep_blank_values=True, strict_parsing=True)
    except (UnicodeDecodeError, ValueError) as exc:
        raise PayloadError("body is not a form") from exc
    ids = form.get("id", [])
    if set(form) != {"id"} or len(ids) != 1 or not PAYMENT_ID.fullmatch(ids[0]):
        raise PayloadError("body is not one id=tr_… (a Mollie payment)")
    return ids[0]


def _signed_index(request: Request, endpoint: Endpoint) -> int:
    value = request.header(SIGNATURE)
    if value is None or not value.strip():
        raise VerificationError(Reason.MISSING_SIGNATURE, f"no {SIGNATURE} header")
    try:
        signature = bytes.fromhex(value.strip().removeprefix("sha256="))
    except ValueError as exc:
        raise VerificationError(Reason.MALFORMED_SIGNATURE, f"{SIGNATURE} is not sha256=<hex>") from exc
    return first_match(endpoint.secrets, lambda s: hmac_digest(s.encode(), request.body), [signature])


def _entity_type(data: dict[str, Any]) -> str:
    embedded = data.get("_embedded")
    entity = embedded.get("entity") if isinstance(embedded, dict) else None
    resource = entity.get("resource") if isinstance(entity, dict) else None
    return resource if isinstance(resource, str) and resource else str(data.get("type", "")).partition(".")[0]


class Mollie(Provider):
    kind = "mollie"
    retry_horizon = 2 * DAY  # up to 10 attempts over 26 hours
    option_names = frozenset({"api_key", "api_base"})
    shorthands = {"MOLLIE_WEBHOOK_SECRET": "secrets", "MOLLIE_API_KEY": "api_key"}
    signature_header_names = (SIGNATURE,)

    def validate(self, endpoint: Endpoint) -> None:
        name, key = endpoint.name, endpoint.options.get("api_key")
        if endpoint.secrets:
            super().validate(endpoint)
        elif not key:
            raise ConfigError(
                f"endpoint {name!r}: classic Mollie webhooks sign nothing: set api_key (every payment is "
                "fetched from Mollie) or the signed webhooks' secrets (fail closed)"
            )
        if key is not None and not (isinstance(key, str) and API_KEY.fullmatch(key)):
            raise ConfigError(f"endpoint {name!r}: api_key is not a Mollie key (live_…, test_… or access_…)")
        if "api_base" in endpoint.options:
            from webhooks.providers import api  # no I/O: only its host check

            api.check_base(name, endpoint.options["api_base"], "api.mollie.com")

    def signs_nothing(self, endpoint: Endpoint) -> bool:
        return not endpoint.secrets  # classic

    def verify(self, request: Request, endpoint: Endpoint, *, now: float) -> Verified:
        if not endpoint.secrets:  # classic: the body is a name to fetch, never acted on
            payment = classic_id(request.body)
            window = int(now) // CLASSIC_WINDOW * CLASSIC_WINDOW
            return Verified(
                [VerifiedEvent(f"{payment}@{window}", CLASSIC_TYPE, object_id=payment)], "mollie-classic-fetch"
            )
        index = _signed_index(request, endpoint)
        data = parse_json(request.body)
        if not isinstance(data, dict):
            raise PayloadError("body is not an event object")
        event_id, event_type, entity = data.get("id"), data.get("type"), data.get("entityId")
        if not (isinstance(event_id, str) and event_id and isinstance(event_type, str) and event_type):
            raise PayloadError("event has no id or type")
        return Verified(
            [
                VerifiedEvent(
                    event_id, event_type, secret_index=index, object_id=entity if isinstance(entity, str) else None
                )
            ],
            "mollie-sha256",
        )

    def event_data(self, payload: bytes, index: int | None) -> Any:
        if looks_like_json(payload):
            return parse_json(payload)
        return {"id": classic_id(payload)}  # classic: only the name of the payment to fetch

    def extract(self, event_type: str, data: Any) -> ObjectRef | None:
        if not isinstance(data, dict) or event_type == CLASSIC_TYPE:
            return None  # classic: nothing delivered is an object's state (``refetch`` gives it)
        entity, version = data.get("entityId"), iso_ms(data.get("createdAt"))
        if not isinstance(entity, str) or not entity or version is None:
            return None
        embedded = data.get("_embedded")
        state = embedded.get("entity") if isinstance(embedded, dict) else None
        return ObjectRef(_entity_type(data), entity, version, state if isinstance(state, dict) else data)

    def refetch(
        self, endpoint: Endpoint, event_type: str, data: Any, ref: ObjectRef | None
    ) -> tuple[Any, ObjectRef | None]:
        """Classic: only Mollie's own copy of the payment is acted on; signed events as delivered."""
        if event_type != CLASSIC_TYPE or not isinstance(data, dict):
            return data, ref
        from webhooks.providers import api, mollie_api  # the API client is worker-side I/O, loaded only here

        payment = mollie_api.payment(endpoint, str(data.get("id", "")))
        return payment, ObjectRef("payment", payment["id"], api.fresh_version(), payment)

    def calls_out(self, endpoint: Endpoint) -> bool:
        return not endpoint.secrets  # classic: a nudge is acted on only through the fetched payment

    def describe_version(self, version: int) -> str | None:
        if version >= FETCHED:  # a classic payment's fetch time, in 0.1 ms (``api.fresh_version``)
            at = time_text(version // 10)
            return f"fetched from Mollie {at}" if at else None
        at = time_text(version) if version > 0 else None
        return f"event created {at}" if at else None

    def sign(
        self, endpoint: Endpoint, body: bytes, *, now: float, secret_index: int = 0, url: str = ""
    ) -> tuple[bytes, dict[str, str]]:
        if not endpoint.secrets:  # classic: Mollie sends the form as it is, signed by nothing
            return body, {
                "Content-Type": "application/x-www-form-urlencoded",
                "User-Agent": "Mollie.nl HTTP client/1.0",
            }
        mac = hmac_digest(endpoint.secrets[secret_index].encode(), body)
        return body, {SIGNATURE: f"sha256={mac.hex()}", "Content-Type": "application/json"}
