"""Stripe: ``Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>…][,v0=…]``.

Signed string: ``f"{t}.{body}"``; HMAC-SHA256 keyed with the whole ``whsec_…`` secret as UTF-8;
hex. Only ``v1`` counts (``v0`` is a test-mode decoy); several ``v1`` appear during a secret roll.
As stripe-python does, items without ``=`` and ``v1`` values that are not 32 bytes of hex are
ignored when another ``v1`` matches; with no usable ``v1`` left the request fails. More than
``MAX_SIGNATURES`` (16) items is ``too_many_signatures``; the timestamp window is checked before the
HMAC. The timestamp and the id (in the body) are signed: no replay key.
Event id: the body's ``id``. Classic events carry a ``data.object`` snapshot; thin (v2) events
carry ``related_object`` and an ISO ``created``.
Docs: https://docs.stripe.com/webhooks#verify-manually

Version of an object state: ``created`` in milliseconds × 10 + a lifecycle rank, so that of two
events of one object in the same second a terminal one (``…succeeded``, ``…canceled``) outranks
an ``…updated``, which outranks a ``…created``. Equal versions keep the state applied first.
Capabilities (I/O in ``stripe_api``): ``refetch`` with ``api_key`` (thin events; every event with
``refetch = true``), reconciliation from ``/v1/events`` (``reconcile_every``), amounts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from webhooks.errors import ConfigError, PayloadError, VerificationError
from webhooks.providers.base import (
    DAY,
    Endpoint,
    Missed,
    ObjectRef,
    Provider,
    Request,
    Verified,
    VerifiedEvent,
    check_timestamp,
    duration_seconds,
    encode_item,
    first_match,
    hmac_digest,
    parse_json,
    require,
    timestamped_hex,
)
from webhooks.providers.fields import iso_ms, minor_amount, time_text
from webhooks.vocabulary import Reason

RECONCILED = "stripe-reconcile"  # the scheme of events listed by the API: our key authenticated them
RANKS = {0: "created", 1: "update", 2: "terminal"}

TERMINAL = (
    "succeeded",
    "canceled",
    "deleted",
    "paid",
    "failed",
    "payment_failed",
    "refunded",
    "voided",
    "marked_uncollectible",
    "closed",
    "expired",
    "completed",
    "won",
    "lost",
)


def _rank(event_type: str) -> int:
    suffix = event_type.rsplit(".", 1)[-1]
    if suffix == "created":
        return 0
    return 2 if suffix in TERMINAL else 1


def _event(event: Any, **known: Any) -> VerifiedEvent | None:
    """The event a parsed body (or an item of ``/v1/events``) is, or None without an id and type."""
    if not isinstance(event, dict) or not isinstance(event.get("id"), str) or not event["id"]:
        return None
    if not isinstance(event.get("type"), str):
        return None
    data = event.get("data")
    obj = data.get("object") if isinstance(data, dict) else event.get("related_object")
    object_id = obj.get("id") if isinstance(obj, dict) else None
    return VerifiedEvent(
        event["id"], event["type"], object_id=object_id if isinstance(object_id, str) else None, **known
    )


def _created_ms(created: Any) -> int:
    if isinstance(created, bool):
        raise PayloadError("created is not a time")
    if isinstance(created, int):
        return created * 1000
    ms = iso_ms(created)
    if ms is None:
        raise PayloadError("event has no created time")
    return ms


class Stripe(Provider):
    kind = "stripe"
    retry_horizon = 3 * DAY  # live mode: up to 3 days
    shorthands = {"STRIPE_WEBHOOK_SECRET": "secrets"}
    option_names = frozenset({"api_key", "api_base", "refetch", "reconcile_every"})
    reconcile_with = "api_key"

    def validate(self, endpoint: Endpoint) -> None:
        super().validate(endpoint)
        options, name = endpoint.options, endpoint.name
        if "refetch" in options and not isinstance(options["refetch"], bool):
            raise ConfigError(f"endpoint {name!r}: refetch must be true or false")
        if (options.get("refetch") or options.get("reconcile_every")) and not options.get("api_key"):
            raise ConfigError(f"endpoint {name!r}: refetch and reconcile_every need api_key")
        self.reconcile_every(endpoint)
        if "api_base" in options:  # the api_key goes there: Stripe's host only
            from webhooks.providers import api  # no I/O: only its host check

            api.check_base(name, options["api_base"], "api.stripe.com")

    def reconcile_every(self, endpoint: Endpoint) -> float | None:
        value = endpoint.options.get("reconcile_every")
        if value in (None, "", 0):
            return None
        try:
            seconds = duration_seconds(str(value))
        except ValueError as exc:
            raise ConfigError(f"endpoint {endpoint.name!r}: reconcile_every: {exc}") from None
        if seconds < 60:
            raise ConfigError(f"endpoint {endpoint.name!r}: reconcile_every must be at least 60 s")
        return seconds

    def verify(self, request: Request, endpoint: Endpoint, *, now: float) -> Verified:
        header = require(request, "Stripe-Signature")
        timestamp, signatures, unusable = timestamped_hex(header, ",", "Stripe-Signature", "t", "v1")
        if timestamp is None:
            raise VerificationError(Reason.MALFORMED_SIGNATURE, "Stripe-Signature has no t=")
        if not signatures:
            reason = Reason.MALFORMED_SIGNATURE if unusable else Reason.MISSING_SIGNATURE
            raise VerificationError(reason, "Stripe-Signature has no usable v1 signature")
        ts = check_timestamp(timestamp, now, endpoint.tolerance_seconds)  # before the HMAC: cheapest first
        signed = timestamp.encode() + b"." + request.body
        index = first_match(endpoint.secrets, lambda s: hmac_digest(s.encode(), signed), signatures)
        event = parse_json(request.body)
        if not isinstance(event, dict) or not isinstance(event.get("id"), str) or not event["id"]:
            raise PayloadError("no event id")
        verified = _event(event, secret_index=index, signed_at=ts)
        if verified is None:
            raise PayloadError("no event type")
        return Verified([verified], "stripe-v1")

    def refetch(
        self, endpoint: Endpoint, event_type: str, data: Any, ref: ObjectRef | None
    ) -> tuple[Any, ObjectRef | None]:
        """With ``api_key``: a thin event's object, or every object with ``refetch = true``."""
        if not endpoint.options.get("api_key") or ref is None:
            return data, ref
        thin = isinstance(ref.state, dict) and ref.state.get("snapshot") is False
        if not (thin or endpoint.options.get("refetch") is True):
            return data, ref
        from webhooks.providers import stripe_api  # the API client is worker-side I/O, loaded only here

        return data, stripe_api.current_object(endpoint, ref, thin)

    def calls_out(self, endpoint: Endpoint) -> bool:
        return bool(endpoint.options.get("api_key"))

    def missed(self, endpoint: Endpoint, since: int, *, undelivered: bool = False) -> Iterator[Missed]:
        from webhooks.providers import stripe_api  # the API client is I/O, loaded only here

        for event in stripe_api.events(endpoint, since, undelivered=undelivered):
            created = event.get("created") if isinstance(event.get("created"), int) else None
            found = _event(event, signed_at=created)
            if found is not None:
                yield Missed(Verified([found], RECONCILED), encode_item(event), created)

    def describe_version(self, version: int) -> str | None:
        ms, rank = divmod(version, 10)
        at = time_text(ms) if version >= 0 else None
        return f"created {at}, rank {RANKS[rank]}" if at and rank in RANKS else None

    def amount(self, payload: bytes, index: int | None) -> tuple[int, str] | None:
        data = parse_json(payload)
        obj = data.get("data") if isinstance(data, dict) else None
        obj = obj.get("object") if isinstance(obj, dict) else None
        return minor_amount(obj.get("amount"), obj.get("currency")) if isinstance(obj, dict) else None

    def extract(self, event_type: str, data: Any) -> ObjectRef | None:
        version = _created_ms(data.get("created")) * 10 + _rank(event_type)
        obj = (data.get("data") or {}).get("object")
        if isinstance(obj, dict) and obj.get("id") and obj.get("object"):
            return ObjectRef(str(obj["object"]), str(obj["id"]), version, obj)
        related = data.get("related_object")
        if isinstance(related, dict) and related.get("id") and related.get("type"):
            # A thin event: no snapshot. The worker may re-fetch ``url`` from the API.
            state = {"related_object": related, "snapshot": False}
            return ObjectRef(str(related["type"]), str(related["id"]), version, state)
        return None

    def sign(
        self, endpoint: Endpoint, body: bytes, *, now: float, secret_index: int = 0, url: str = ""
    ) -> tuple[bytes, dict[str, str]]:
        t = str(int(now))
        mac = hmac_digest(endpoint.secrets[secret_index].encode(), t.encode() + b"." + body)
        return body, {"Stripe-Signature": f"t={t},v1={mac.hex()}", "Content-Type": "application/json"}
