"""Reconciliation: store and enqueue the events an endpoint never received, listed by its
provider's API (the kind's declared capability: ``Provider.reconciles`` and ``missed``; today
Stripe's ``/v1/events`` with the endpoint's ``api_key``).

``webhooks reconcile <endpoint> --since 3d`` (only the undelivered ones with ``--undelivered``)
stores and enqueues each listed event exactly as the receiver does a delivery (the group commit,
``batch.committer``: insert-or-ignore on ``(endpoint, event id)``, so an event delivered before,
during or after the run is stored once, and only new ones are queued). Such rows carry the scheme
the provider gives them (``stripe-reconcile``): they were authenticated by the API answering our
key, not by a signature. No database connection is held while a page is fetched.

``reconcile_every = "15m"`` on the endpoint (read by ``Provider.reconcile_every``, which also
validates it at start-up) runs it from the workers (``scheduled``) over the last two intervals; a
Redis key taken with ``SET NX EX`` makes one worker do each run.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from webhooks import providers
from webhooks.errors import ConfigError
from webhooks.providers.base import Endpoint, Missed
from webhooks.runtime import Runtime

log = logging.getLogger("webhooks.reconcile")  # the name the docs and log filters know


@dataclass
class Summary:
    seen: int = 0
    stored: int = 0  # already stored before this run found them
    added: int = 0

    def __str__(self) -> str:
        return f"seen {self.seen}, already stored {self.stored}, added {self.added}"


def endpoint_of(rt: Runtime, name: str) -> Endpoint:
    endpoint = rt.settings.endpoints.get(name)
    if endpoint is None:
        raise ConfigError(f"no endpoint {name!r}")
    if not providers.get(endpoint.kind).reconciles(endpoint):
        able = " or ".join(
            f"a {k} endpoint with an {p.reconcile_with}"
            for k, p in providers.PROVIDERS.items()
            if p.reconcile_with is not None
        )
        raise ConfigError(f"endpoint {name!r}: reconciliation needs {able or 'a kind that lists its events'}")
    return endpoint


def reconcile(
    rt: Runtime, name: str, since: int, *, undelivered: bool = False, progress: Callable[[Missed], None] | None = None
) -> Summary:
    """Store and enqueue every event of ``name`` created since ``since`` (unix s) that is missing."""
    from webhooks.receiver import batch, rows

    endpoint = endpoint_of(rt, name)
    summary = Summary()
    for missed in providers.get(endpoint.kind).missed(endpoint, since, undelivered=undelivered):
        summary.seen += 1
        rows.check_storable(missed.verified)
        item = rows.pending(endpoint, missed.verified, missed.body, {}, datetime.now(UTC))
        new = batch.committer(rt).store(item).new if item is not None else []
        summary.added += len(new)
        summary.stored += 1 - len(new)
        if progress is not None:
            progress(missed)
    log.info("reconcile %s: %s", name, summary)
    return summary


def every(endpoint: Endpoint) -> float | None:
    """The endpoint's ``reconcile_every`` in seconds (None: not scheduled), as its kind reads it."""
    return providers.get(endpoint.kind).reconcile_every(endpoint)


def scheduled(rt: Runtime) -> Callable[[], None]:
    """A tick for the workers' ticker: starts each due reconciliation on its own thread."""
    plans = {name: seconds for name, e in rt.settings.endpoints.items() if (seconds := every(e)) is not None}
    for name in plans:
        endpoint_of(rt, name)  # fail at start, not at the first run
    running: set[str] = set()

    def run(name: str, seconds: float) -> None:
        try:
            reconcile(rt, name, int(time.time() - 2 * seconds))
        except Exception as exc:  # a failed run is retried at the next interval
            log.warning("reconcile %s failed: %s: %s", name, exc.__class__.__name__, str(exc)[:200])
        finally:
            running.discard(name)

    def tick() -> None:
        for name, seconds in plans.items():
            if name in running:
                continue
            # One worker per interval: the key lives as long as the interval.
            lock = f"{rt.settings.queue_name}:webhooks:reconcile:{name}"  # WEBHOOKS_QUEUE first
            if rt.queue.connection.set(lock, "1", nx=True, ex=int(seconds)):
                running.add(name)
                threading.Thread(target=run, args=(name, seconds), name=f"reconcile-{name}", daemon=True).start()

    return tick
