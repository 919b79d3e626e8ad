"""The object an event moves, as processing hands it on: from the stored payload (re-fetched from
the provider's API when configured), storable, and merged into the stored state by providers
that fold their events.

Hostile values (``storable``): an object type or id that does not fit its key column or holds
NUL / lone surrogates is keyed ``sha256:<hex>`` of it; the stored state has NUL and lone
surrogates replaced by U+FFFD (and NaN/Infinity by null). The event's raw payload stays exact, and
handlers get its data as sent; ``state``, ``object_type`` and ``object_id`` are the stored ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from webhooks import providers
from webhooks.configuration.settings import Settings
from webhooks.providers.base import ObjectRef
from webhooks.storable import storable_json, storable_key

from . import fetch

BIGINT = 2**63 - 1


class Row(Protocol):
    """What is read of a claimed event row (``webhooks.store.base.Claimed``)."""

    @property
    def endpoint(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def event_type(self) -> str: ...
    @property
    def payload(self) -> bytes: ...
    @property
    def item_index(self) -> int | None: ...
    @property
    def body_digest(self) -> str | None: ...


def storable(ref: ObjectRef) -> ObjectRef:
    """The object key, version and state as both databases store them (see the module's doc)."""
    return ObjectRef(
        storable_key(ref.type, 100),
        storable_key(ref.id, 255),
        max(-BIGINT, min(BIGINT, ref.version)),
        storable_json(ref.state),
    )


Prepared = tuple[Any, ObjectRef | None]
Fold = Callable[[Any, ObjectRef], ObjectRef]  # ``Provider.fold``


def prepare(event: Row, settings: Settings) -> Prepared:
    """The event's data and the object it moves, as handlers must see them (re-fetched from the
    provider's API when configured: called holding no database lock), storable."""
    provider = providers.get(event.kind)  # its declared capabilities: event_data, extract, refetch
    # A batch item's row holds the item itself (its delivery's body is kept once in ``bodies``).
    data = provider.event_data(event.payload, None if event.body_digest is not None else event.item_index)
    ref = provider.extract(event.event_type, data)
    data, ref = fetch.current(provider, settings.endpoints.get(event.endpoint), event.event_type, data, ref)
    return data, None if ref is None else storable(ref)


def merge(fold: Fold, stored: Any, ref: ObjectRef) -> tuple[ObjectRef, str | None]:
    """A folding provider's ``ref`` merged into the ``stored`` state by its ``fold`` (asked only of
    a kind that declares ``folds``), and the id of the event the fold names as its latest."""
    merged: ObjectRef = storable(fold(stored, ref))
    latest = merged.state.get("latest") if isinstance(merged.state, dict) else None
    return merged, latest if isinstance(latest, str) else None
