"""What one verified delivery stores: its ``events`` rows (their status is the store's to write),
and for a delivery whose events are items of its body, its ``bodies`` row (the body and headers,
kept once)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import datetime

from webhooks import providers
from webhooks.errors import PayloadError
from webhooks.providers.base import Endpoint, Provider, Verified, VerifiedEvent, encode_item
from webhooks.receiver import batch
from webhooks.storable import is_storable, redact, storable_text

KEY_WIDTH = 255  # events.event_id and event_type


def storable(value: str) -> bool:
    """Fits a key column on every database."""
    return len(value) <= KEY_WIDTH and is_storable(value)


def check_storable(verified: Verified) -> None:
    """Refuse, before anything is stored, an id or type that one of the databases cannot key on.

    SQLite would take them and PostgreSQL would not (a 503 or 500 loop): both answer 400
    ``malformed_payload`` instead, and the request is quarantined for an operator to see.
    """
    for event in verified.events:
        for name, value in (("event id", event.event_id), ("event type", event.event_type)):
            if not storable(value):
                raise PayloadError(f"{name} is longer than {KEY_WIDTH} characters or holds NUL or a lone surrogate")


def matched_secret(endpoint: Endpoint, provider: Provider, index: int | None) -> str | None:
    """The database id of the secret at ``index`` (``config_secrets.id``), or None: a file's
    secret (its ``secret_index`` alone says which), or a kind whose index names no secret."""
    if index is None or not provider.index_names_secret or not 0 <= index < len(endpoint.secret_ids):
        return None
    return endpoint.secret_ids[index]


def stored_headers(endpoint: Endpoint, verified: Verified, headers: dict[str, str]) -> dict[str, str]:
    """Headers fit to keep on the event: credentials redacted, and for schemes that sign no id or
    timestamp the signature too (a stored signature is a replayable one; its verdict is kept).
    NUL and lone surrogates (a WSGI server may pass them) become U+FFFD: PostgreSQL refuses them."""
    kept = {storable_text(k): storable_text(v) for k, v in redact(headers).items()}
    if verified.replay_key is None:
        return kept
    names = {n.lower() for n in providers.get(endpoint.kind).signature_headers(endpoint)}
    return {k: ("[verified signature]" if k.lower() in names else v) for k, v in kept.items()}


def body_row(
    endpoint: Endpoint, verified: Verified, body: bytes, headers: dict[str, str], now: datetime
) -> dict[str, object] | None:
    """The ``bodies`` row of a delivery that carries several events, items of its body (kept once
    for all of them), or None when the body is its one event's own (a batch of one item stays
    whole in its event's row: its ``item_index`` finds the item, as before)."""
    if len(verified.events) < 2 or all(e.index is None for e in verified.events):
        return None
    return {
        "endpoint": endpoint.name,
        "digest": hashlib.sha256(body).hexdigest(),
        "body": body,
        "headers": headers,
        "received_at": now,
    }


def event_rows(
    endpoint: Endpoint,
    verified: Verified,
    body: bytes,
    headers: dict[str, str],
    now: datetime,
    digest: str | None = None,
) -> list[dict[str, object]]:
    """The ``events`` rows of one verified delivery, without a status (``Store.inserts`` writes
    it, and ``status_at``). With ``digest`` (the body
    is kept in ``bodies``), each batch item's row holds the item's own JSON and no headers."""
    provider = providers.get(endpoint.kind)
    data = provider.event_data(body, None) if digest is not None else None  # parsed once for every item

    def own(e: VerifiedEvent) -> bytes:
        return body if data is None or e.index is None else encode_item(provider.item(data, e.index))

    return [
        {
            "endpoint": endpoint.name,
            "event_id": e.event_id,
            "kind": endpoint.kind,
            "event_type": e.event_type,
            "attempts": 0,
            "received_at": now,
            "payload": own(e),
            "item_index": e.index,
            "headers": headers if digest is None else {},
            "body_digest": digest,
            "scheme": verified.scheme,
            "secret_index": e.secret_index,
            "secret_id": matched_secret(endpoint, provider, e.secret_index),
            "signed_at": e.signed_at,
            # Search keys only: the column width must never turn a genuine event into a 503.
            "object_id": _search_key(e.object_id),
            "reference": _search_key(e.reference),
            # One signature per request: only single-event schemes carry a replay key.
            "replay_key": verified.replay_key,
        }
        for e in verified.events
    ]


def pending(
    endpoint: Endpoint,
    verified: Verified,
    body: bytes,
    headers: dict[str, str],
    now: datetime,
    known: Callable[[str, str], bool] | None = None,
) -> batch.Pending | None:
    """One verified delivery's rows, ready for the group commit; None for a batch whose body
    ``known(endpoint, digest)`` says is kept already: its events were stored with it, in one
    transaction, and each is stored still or purged and tombstoned, so it is a duplicate, and its
    thousands of rows are neither built nor sent."""
    kept = body_row(endpoint, verified, body, headers, now)
    if kept is not None and known is not None and known(endpoint.name, str(kept["digest"])):
        return None
    rows = event_rows(endpoint, verified, body, headers, now, None if kept is None else str(kept["digest"]))
    return batch.Pending(endpoint, verified, rows, kept)


def _search_key(value: str | None) -> str | None:
    """A search column's value: clipped to its width, dropped when no database could store it."""
    if value is None:
        return None
    value = value[:KEY_WIDTH]
    return value if storable(value) else None
