"""Adyen: standard notifications (HMAC per item) and platform/management webhooks (HMAC header).

Standard: each ``NotificationRequestItem.additionalData.hmacSignature`` is base64 HMAC-SHA256,
keyed with the hex-decoded HMAC key, over
``pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success``
(missing field = empty string, no escaping, ``value`` in minor units). One bad item rejects the
batch. Optional HTTP Basic auth. Answer ``[accepted]``.
Platform/management: header ``HmacSignature`` = base64 HMAC-SHA256 over the raw body, same key.
Docs: https://docs.adyen.com/development-resources/webhooks/verify-hmac-signatures

Only ``merchantReference`` may hold a ``:``; a verified item whose other fields are not shaped
as Adyen sends them (``check_shape``: a string value, a ``:`` in pspReference) is
``malformed_payload``, so the unescaped join splits one way only.
Event id: ``pspReference:eventCode:success`` (Adyen has no id field); platform webhooks:
``type:sha256(body)[:32]``. Object: the payment (``originalReference`` for modifications).
Its state is a fold of its notifications (``fold``): the set applied, keyed by event id, and
what follows from the set alone — status, authorised amount, captured / refunded / charged-back
totals, merchant reference, ``eventCode`` of the furthest step (stage, then ``eventDate``) — so
every arrival order gives the same state; its version is the number of notifications applied. A
payment with a modification but no AUTHORISATION has ``gap: true``. What the id is made of is
signed (the item's fields, or the body): no replay key is needed. A key that decodes to nothing is
refused at start-up.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from typing import Any

from webhooks.errors import ConfigError, PayloadError, VerificationError
from webhooks.providers.base import (
    DAY,
    Endpoint,
    ObjectRef,
    Provider,
    Reply,
    Request,
    Verified,
    VerifiedEvent,
    b64decode,
    first_match,
    hmac_digest,
    parse_json,
)
from webhooks.providers.fields import iso_ms, minor_amount, time_text
from webhooks.vocabulary import Reason

SIGNED_FIELDS = ("pspReference", "originalReference", "merchantAccountCode", "merchantReference")
STAGES = {
    1: ("AUTHORISATION", "AUTHORISATION_ADJUSTMENT", "PENDING"),
    3: (
        "CANCELLATION",
        "TECHNICAL_CANCEL",
        "CANCEL_OR_REFUND",
        "REFUND",
        "REFUND_FAILED",
        "REFUNDED_REVERSED",
        "REFUND_WITH_DATA",
        "OFFER_CLOSED",
        "EXPIRE",
    ),
    4: (
        "CHARGEBACK",
        "CHARGEBACK_REVERSED",
        "NOTIFICATION_OF_CHARGEBACK",
        "SECOND_CHARGEBACK",
        "PREARBITRATION_WON",
        "PREARBITRATION_LOST",
        "REQUEST_FOR_INFORMATION",
        "NOTIFICATION_OF_FRAUD",
        "DISPUTE_DEFENSE_PERIOD_ENDED",
        "INFORMATION_SUPPLIED",
    ),
}
STAGE = {code: stage for stage, codes in STAGES.items() for code in codes}  # others: 2 (capture)
STAGE_NAMES = {1: "authorisation", 2: "capture", 3: "cancel or refund", 4: "dispute"}
LEGACY_STAGE = 10**14  # versions before the fold: stage × 10^14 + eventDate in ms
NOT_PAYMENTS = frozenset({"REPORT_AVAILABLE", "RECURRING_CONTRACT"})
ACCEPTED = Reply(b"[accepted]", "text/plain")
# The signed string joins its fields with ``:`` unescaped, so a ``:`` may only be where Adyen puts
# one: in merchantReference (vector A2). Every other field has a shape that holds none, which
# makes the split unique — one signature, one item, one event id. pspReference is alphanumeric
# (a report's file name for REPORT_AVAILABLE; ``_``, ``.``, ``-`` allowed for those).
SHAPES = {
    "pspReference": re.compile(r"[A-Za-z0-9_.-]+"),
    "originalReference": re.compile(r"[A-Za-z0-9_.-]*"),
    "merchantAccountCode": re.compile(r"[^:]*"),
    "eventCode": re.compile(r"[A-Z][A-Z0-9_]*"),
    "success": re.compile(r"true|false"),
}
CURRENCY = re.compile(r"[A-Z]*")


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def signed_string(item: dict[str, Any]) -> bytes:
    amount = item.get("amount")
    amount = amount if isinstance(amount, dict) else {}  # a forged item may carry anything
    parts = [_text(item.get(name)) for name in SIGNED_FIELDS]
    parts += [_text(amount.get("value")), _text(amount.get("currency"))]
    parts += [_text(item.get("eventCode")), _text(item.get("success"))]
    return ":".join(parts).encode()


def check_shape(item: dict[str, Any], position: int) -> None:
    """Refuse (``malformed_payload``) a verified item whose fields Adyen never sends so typed or
    shaped: another split of the same signed string, or ``"value": "1000"`` for ``1000``."""
    for name, shape in SHAPES.items():
        value = item.get(name)
        if name in ("originalReference", "merchantAccountCode") and value is None:
            continue
        if not isinstance(value, str) or not shape.fullmatch(value):
            raise PayloadError(f"item {position}: {name} is not as Adyen sends it")
    if not isinstance(item.get("merchantReference"), str | None):
        raise PayloadError(f"item {position}: merchantReference is not a string")
    amount = item.get("amount")
    if amount is None:
        return
    value = amount.get("value") if isinstance(amount, dict) else None
    currency = amount.get("currency") if isinstance(amount, dict) else None
    if (
        not isinstance(amount, dict)
        or not (value is None or (isinstance(value, int) and not isinstance(value, bool)))
        or not (currency is None or (isinstance(currency, str) and CURRENCY.fullmatch(currency)))
    ):
        raise PayloadError(f"item {position}: amount is not an integer value in minor units and a currency")


def _keys(endpoint: Endpoint) -> list[bytes]:
    return [bytes.fromhex(secret) for secret in endpoint.secrets]


class Adyen(Provider):
    kind = "adyen"
    retry_horizon = 30 * DAY  # retries for up to 30 days
    shorthands = {"ADYEN_HMAC_KEY": "secrets", "ADYEN_BASIC_AUTH": "basic_auth"}

    def validate(self, endpoint: Endpoint) -> None:
        super().validate(endpoint)
        try:
            if not all(_keys(endpoint)):
                raise ValueError("empty key")
        except ValueError as exc:
            raise ConfigError(f"endpoint {endpoint.name!r}: an Adyen HMAC key is empty or not hex") from exc
        if endpoint.basic_auth is not None and ":" not in endpoint.basic_auth:
            raise ConfigError(f"endpoint {endpoint.name!r}: basic_auth must be 'user:password'")

    def verify(self, request: Request, endpoint: Endpoint, *, now: float) -> Verified:
        self._check_basic_auth(request, endpoint)
        keys = [key.hex() for key in _keys(endpoint)]
        header = request.header("HmacSignature")
        if header is not None:
            index = first_match(
                keys, lambda k: hmac_digest(bytes.fromhex(k), request.body), [b64decode(header.strip())]
            )
            body = parse_json(request.body)
            if not isinstance(body, dict) or not isinstance(body.get("type"), str):
                raise PayloadError("no event type")
            event_id = f"{body['type']}:{hashlib.sha256(request.body).hexdigest()[:32]}"
            return Verified([VerifiedEvent(event_id, body["type"], secret_index=index)], "adyen-hmac-header", ACCEPTED)
        body = parse_json(request.body)
        items = body.get("notificationItems") if isinstance(body, dict) else None
        if not isinstance(items, list) or not items:
            raise VerificationError(Reason.MISSING_SIGNATURE, "no HmacSignature header and no notificationItems")
        events = []
        for position, wrapper in enumerate(items):
            item = wrapper.get("NotificationRequestItem") if isinstance(wrapper, dict) else None
            if not isinstance(item, dict):
                raise PayloadError(f"item {position} is not a NotificationRequestItem")
            extra = item.get("additionalData")
            signature = extra.get("hmacSignature") if isinstance(extra, dict) else None
            if not isinstance(signature, str) or not signature:
                raise VerificationError(Reason.MISSING_SIGNATURE, f"item {position} has no hmacSignature")
            signed = signed_string(item)
            index = first_match(
                keys,
                lambda k, s=signed: hmac_digest(bytes.fromhex(k), s),  # type: ignore[misc]
                [b64decode(signature)],
            )
            check_shape(item, position)
            event_id = f"{item['pspReference']}:{item['eventCode']}:{_text(item.get('success'))}"
            payment = item.get("originalReference") or item["pspReference"]
            if item["eventCode"] in NOT_PAYMENTS:
                payment = None
            events.append(
                VerifiedEvent(
                    event_id,
                    str(item["eventCode"]),
                    index=position,
                    secret_index=index,
                    object_id=_text(payment) or None,
                    reference=_text(item.get("merchantReference")) or None,
                )
            )
        return Verified(events, "adyen-hmac-item", ACCEPTED)

    def _check_basic_auth(self, request: Request, endpoint: Endpoint) -> None:
        if endpoint.basic_auth is None:
            return
        header = request.header("Authorization") or ""
        scheme, _, token = header.partition(" ")
        try:
            given = base64.b64decode(token, validate=True) if scheme.lower() == "basic" else b""
        except (binascii.Error, ValueError):
            given = b""
        if not hmac.compare_digest(given, endpoint.basic_auth.encode()):
            raise VerificationError(Reason.BAD_BASIC_AUTH, "wrong or missing basic auth", status=401)

    def batch_item(self, data: Any, index: int) -> Any:
        try:
            return data["notificationItems"][index]["NotificationRequestItem"]
        except (KeyError, IndexError, TypeError):
            return None

    def extract(self, event_type: str, data: Any) -> ObjectRef | None:
        if "eventCode" not in data or event_type in NOT_PAYMENTS:
            return None
        payment = data.get("originalReference") or data.get("pspReference")
        return ObjectRef("payment", str(payment), 1, fold(None, _notification(event_type, data)))

    folds = True
    gap_type = "payment"

    def fold(self, stored: Any, incoming: ObjectRef) -> ObjectRef:
        """The payment's state with ``incoming``'s notifications added to ``stored``'s."""
        state = fold(stored, *incoming.state.get("notifications", {}).values())
        return ObjectRef(incoming.type, incoming.id, len(state["notifications"]), state)

    def describe_version(self, version: int) -> str | None:
        """The fold's count; rows stored before the fold (revision 0005): ``stage × 10^14`` + ``eventDate`` ms."""
        if 0 < version < LEGACY_STAGE:
            return f"fold of {version} notification{'' if version == 1 else 's'}"
        stage, ms = divmod(version, LEGACY_STAGE)
        if version < 0 or stage not in STAGE_NAMES:
            return None
        at = time_text(ms) if ms else None
        return f"stage {stage} ({STAGE_NAMES[stage]}), eventDate {at or 'missing'}"

    def amount(self, payload: bytes, index: int | None) -> tuple[int, str] | None:
        data = parse_json(payload)
        if index is not None:
            data = self.batch_item(data, index)
        found = data.get("amount") if isinstance(data, dict) else None
        return minor_amount(found.get("value"), found.get("currency")) if isinstance(found, dict) else None

    def sign(
        self, endpoint: Endpoint, body: bytes, *, now: float, secret_index: int = 0, url: str = ""
    ) -> tuple[bytes, dict[str, str]]:
        key = _keys(endpoint)[secret_index]
        headers = {"Content-Type": "application/json"}
        if endpoint.basic_auth:
            headers["Authorization"] = "Basic " + base64.b64encode(endpoint.basic_auth.encode()).decode()
        data = parse_json(body)
        if isinstance(data, dict) and "notificationItems" in data:
            for wrapper in data["notificationItems"]:
                item = wrapper["NotificationRequestItem"]
                mac = base64.b64encode(hmac_digest(key, signed_string(item))).decode()
                item.setdefault("additionalData", {})["hmacSignature"] = mac
            return json.dumps(data).encode(), headers
        headers["HmacSignature"] = base64.b64encode(hmac_digest(key, body)).decode()
        return body, headers


# -- the payment fold --------------------------------------------------------------------------

CAPTURES = frozenset({"CAPTURE"})
REFUNDS = frozenset({"REFUND", "REFUND_WITH_DATA"})
CHARGEBACKS = frozenset({"CHARGEBACK", "SECOND_CHARGEBACK"})
CANCELS = frozenset({"CANCELLATION", "TECHNICAL_CANCEL", "CANCEL_OR_REFUND"})
NOTE_FIELDS = ("pspReference", "originalReference", "merchantReference", "eventDate", "reason")


def _notification(event_type: str, data: dict[str, Any]) -> dict[str, Any]:
    amount = data.get("amount") if isinstance(data.get("amount"), dict) else {}
    value = amount.get("value") if isinstance(amount, dict) else None
    note: dict[str, Any] = {k: _text(data.get(k)) for k in NOTE_FIELDS}
    note.update(
        eventCode=event_type,
        success=_text(data.get("success")),
        value=_minor_units(value),
        currency=_text(amount.get("currency") if isinstance(amount, dict) else None),
    )
    note["id"] = f"{note['pspReference']}:{event_type}:{note['success']}"
    return note


def _minor_units(value: Any) -> int:
    """An amount's value: ``1000`` and ``"1000"`` sign alike, so both read alike (rows stored
    before ``check_shape`` refused the string form may hold it); anything else is 0."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,18}", value):
        return int(value)
    return 0


def _notes(state: Any) -> list[dict[str, Any]]:
    """The notifications a stored state holds (a state from before the fold is one of them)."""
    if not isinstance(state, dict):
        return []
    if isinstance(state.get("notifications"), dict):
        return list(state["notifications"].values())
    return [_notification(str(state["eventCode"]), state)] if state.get("eventCode") else []


def _rank(note: dict[str, Any]) -> tuple[int, int, str]:
    return STAGE.get(note["eventCode"], 2), iso_ms(note["eventDate"]) or 0, note["id"]


def fold(current: Any, *added: dict[str, Any]) -> dict[str, Any]:
    """A payment's state from the union of its notifications: a function of the set, not of the order.

    One id seen with two bodies keeps the greater (by canonical JSON), so that is order-free too.
    """
    notes: dict[str, dict[str, Any]] = {}
    for note in [*_notes(current), *added]:
        held = notes.get(note["id"])
        if held is None or json.dumps(note, sort_keys=True) > json.dumps(held, sort_keys=True):
            notes[note["id"]] = note
    ok = [n for n in notes.values() if n["success"] == "true"]

    def total(codes: frozenset[str]) -> int:
        return sum(n["value"] for n in ok if n["eventCode"] in codes)

    auth = max((n for n in notes.values() if n["eventCode"] == "AUTHORISATION"), key=_rank, default=None)
    authorised = auth["value"] if auth and auth["success"] == "true" else 0
    captured, refunded = total(CAPTURES), total(REFUNDS)
    charged_back = total(CHARGEBACKS) - total(frozenset({"CHARGEBACK_REVERSED"}))
    codes = {n["eventCode"] for n in ok}
    status = (
        "charged_back"
        if charged_back > 0
        else "refunded"
        if refunded and refunded >= max(captured, authorised)
        else "partially_refunded"
        if refunded
        else "cancelled"
        if codes & CANCELS
        else "captured"
        if captured and captured >= authorised
        else "partially_captured"
        if captured
        else "authorised"
        if authorised
        else "refused"
        if auth
        else "unknown"
    )
    latest = max(notes.values(), key=_rank)
    by_id = sorted(notes.values(), key=lambda n: n["id"])
    payment = (auth or {}).get("pspReference") or latest["originalReference"] or latest["pspReference"]
    reference = (auth or {}).get("merchantReference") or next((n["merchantReference"] for n in by_id), "")
    return {
        "pspReference": payment,
        "merchantReference": reference,
        "status": status,
        "currency": (auth or latest)["currency"],
        "authorised": authorised,
        "captured": captured,
        "refunded": refunded,
        "chargedBack": charged_back,
        "eventCode": latest["eventCode"],
        "success": latest["success"],
        "latest": latest["id"],
        "gap": auth is None and any(n["eventCode"] != "AUTHORISATION" for n in notes.values()),
        "applied": [n["id"] for n in by_id],
        "notifications": {n["id"]: n for n in by_id},
    }
