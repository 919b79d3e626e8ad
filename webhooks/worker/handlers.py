"""The dispatch table: (provider, event type) → the user's handlers.

    from webhooks import on

    @on("stripe", "payment_intent.succeeded")
    def ship(event, state, idempotency_key):
        ...

``provider`` is the endpoint name or the provider kind; ``"*"`` as the event type matches every
event of that provider. A handler receives the event (``HandlerEvent``), the object's current
state (the newest known, which may be newer than this event; ``None`` when the event carries no
object) and an idempotency key that is the same on every retry and replay of this event for this
handler: pass it to downstream APIs so a repeated run has no second effect. Handlers may accept
fewer positional arguments (``def h(event)`` works). Modules named in ``WEBHOOKS_HANDLERS`` are
imported by the worker, and only handlers defined in them (or in their submodules) run: several
apps in one process do not run each other's handlers.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import logging
import os
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from webhooks.errors import ConfigError

log = logging.getLogger("webhooks.handlers")  # the name the docs and log filters know
Handler = Callable[..., Any]
REGISTRY: dict[tuple[str, str], list[Handler]] = defaultdict(list)


@dataclass(frozen=True)
class HandlerEvent:
    """What a handler learns of the event. ``session`` is the processing transaction: writes
    through it commit with the event's ``processed`` mark, or roll back with a failure. ``data``
    is the event as sent; ``object_type``/``object_id`` and the state are the stored ones (see
    ``jobs.process`` for values no database can store). On SQLite the first write takes the
    database's write lock until the mark: write last, after any slow call."""

    endpoint: str
    kind: str
    event_id: str
    type: str
    data: Any
    object_type: str | None
    object_id: str | None
    version: int | None
    is_latest: bool
    attempt: int
    session: Session

    @property
    def provider(self) -> str:
        """The endpoint's name under its former attribute name, for handlers written before."""
        return self.endpoint


def on(provider: str, *event_types: str) -> Callable[[Handler], Handler]:
    """Register the decorated function for these event types of ``provider``."""

    def register(func: Handler) -> Handler:
        for event_type in event_types or ("*",):
            if func not in REGISTRY[(provider, event_type)]:
                REGISTRY[(provider, event_type)].append(func)
        return func

    return register


def load(modules: Iterable[str]) -> None:
    """Import the handler modules; ``ConfigError`` names the one that cannot be imported and why.

    The working directory is on the import path, as ``flask --app`` and gunicorn put it: a
    ``WEBHOOKS_HANDLERS=myapp.handlers`` next to where the service starts is found.
    """
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:  # any error while importing: the module is unusable as configured
            raise ConfigError(f"WEBHOOKS_HANDLERS: cannot import {module!r} ({exc.__class__.__name__}: {exc})") from exc


def _enabled(handler: Handler, modules: Iterable[str]) -> bool:
    name = handler.__module__
    return any(name == m or name.startswith(m + ".") for m in modules)


def handlers_for(endpoint: str, kind: str, event_type: str, modules: Iterable[str]) -> list[Handler]:
    """Handlers for this event, from the configured modules (or their submodules) only."""
    modules = tuple(modules)
    found: list[Handler] = []
    for key in dict.fromkeys(((endpoint, event_type), (kind, event_type), (endpoint, "*"), (kind, "*"))):
        found += [h for h in REGISTRY.get(key, ()) if h not in found and _enabled(h, modules)]
    return found


def name(handler: Handler) -> str:
    """A handler's name as attempts record it: ``module.qualname``."""
    return f"{handler.__module__}.{getattr(handler, '__qualname__', repr(handler))}"


def names(found: Iterable[Handler]) -> list[str]:
    return [name(h) for h in found]


def loaded(modules: Iterable[str]) -> dict[str, list[str]]:
    """``provider event-type`` → the handlers that run for it, from the configured modules: what
    ``serve`` and ``worker`` log at start-up."""
    modules = tuple(modules)
    return {
        f"{provider} {event_type}": names(h for h in found if _enabled(h, modules))
        for (provider, event_type), found in sorted(REGISTRY.items())
        if any(_enabled(h, modules) for h in found)
    }


def announce(modules: Iterable[str]) -> None:
    """Log in one line which handlers run for which events (``serve`` and ``worker`` at start-up)."""
    modules = tuple(modules)
    table = loaded(modules)
    if table:
        log.info("handlers: %s", "; ".join(f"{key} → {', '.join(found)}" for key, found in table.items()))
    else:
        where = f"in {', '.join(modules)}" if modules else "(WEBHOOKS_HANDLERS is not set)"
        log.info("no handlers %s: events are stored and their objects recorded, no code of yours runs", where)


def idempotency_key(endpoint: str, event_id: str, handler: Handler) -> str:
    return "whk_" + hashlib.sha256(f"{endpoint}\0{event_id}\0{name(handler)}".encode()).hexdigest()[:32]


def call(handler: Handler, event: HandlerEvent, state: Any) -> Any:
    args = (event, state, idempotency_key(event.endpoint, event.event_id, handler))
    try:
        arity = _arity(handler)
    except TypeError:  # an unhashable callable: not cached
        arity = _arity.__wrapped__(handler)
    return handler(*args[:arity])


@functools.lru_cache(maxsize=1024)
def _arity(handler: Handler) -> int:
    """How many of (event, state, idempotency key) the handler takes (all three with ``*args``):
    read once per handler (``inspect.signature`` cost more than a no-op handler's whole run)."""
    try:
        params = inspect.signature(handler).parameters.values()
    except (TypeError, ValueError):
        return 3
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 3
    return len([p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)])
