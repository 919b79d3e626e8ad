"""``/metrics``: the scrape. Each process's counters (``webhooks.metrics``), summed over the
processes of a host when ``PROMETHEUS_MULTIPROC_DIR`` is set, and the service-wide gauges read
from the database and Redis at scrape time, so they are right whichever instance is scraped."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from webhooks.configuration import settings as config
from webhooks.metrics import (
    ADMIN_AUTH_FAILURES,
    ATTEMPTS,
    DELIVERIES,
    DURATION,
    ENQUEUE_FAILURES,
    FORWARD_ATTEMPTS,
    FORWARD_DURATION,
    JOB_ERRORS,
    PENDING,
    RATE_LIMIT_FAILURES,
    RECOVERIES,
    REJECTIONS,
    Service,
)
from webhooks.timestamps import aware
from webhooks.vocabulary import Status

if TYPE_CHECKING:
    from prometheus_client import Metric

    from webhooks.configuration.destinations import Destination
    from webhooks.forward.backlog import Backlog, Held

log = logging.getLogger("webhooks.metrics")


def failed_query() -> Any:
    """The failed events, counted up to ``COUNT_CAP + 1`` entries of ``ix_events_status_feed``:
    a scrape costs the same with ten failed events or ten million (an alert fires on any)."""
    from sqlalchemy import literal, select

    from webhooks.tables.events import Event, capped_count

    return capped_count(select(literal(1)).where(Event.status == Status.FAILED))


def waiting_query() -> Any:
    """The ``queued`` rows, capped like ``failed_query`` (from ``ix_events_unfinished``): the queue's
    depth where this process queues nothing (``webhooks serve``'s web processes hand the rows over
    to the worker process, whose queue is in its own memory)."""
    from sqlalchemy import literal, select

    from webhooks.tables.events import Event, capped_count

    return capped_count(select(literal(1)).where(Event.status == Status.QUEUED))


def oldest_query() -> Any:
    """When the oldest pending event arrived: one seek per status at the low end of its range of
    ``ix_events_status_feed`` (an ``IN`` over the statuses would read every pending row)."""
    from sqlalchemy import func, select, union_all

    from webhooks.tables.events import Event

    firsts = union_all(*(select(func.min(Event.received_at).label("at")).where(Event.status == s) for s in PENDING))
    found = firsts.subquery()
    return select(func.min(found.c.at))


class ServiceCollector(Collector):
    """The service-wide gauges, read from the database and Redis when scraped."""

    def __init__(self, rt: Service) -> None:
        self.rt = rt

    def _handed_over(self) -> bool:
        return bool(getattr(self.rt.queue, "handed_over", False))

    def collect(self) -> Iterator[Metric]:
        from sqlalchemy import select
        from sqlalchemy.exc import SQLAlchemyError

        from webhooks.forward.backlog import backlogs, held
        from webhooks.tables.events import COUNT_CAP

        up = GaugeMetricFamily("webhooks_up", "1 when the database or Redis answered this scrape", labels=["service"])
        waiting: int | None = None
        try:
            with self.rt.engine.connect() as conn:
                failed = conn.execute(select(failed_query())).scalar_one()
                oldest = conn.execute(oldest_query()).scalar()
                configured = cast("Mapping[str, Destination]", self.rt.settings.destinations)
                forwarding = backlogs(conn, list(configured), datetime.now(UTC))
                holding = held(conn, configured)
                waiting = conn.execute(select(waiting_query())).scalar_one() if self._handed_over() else None
            up.add_metric(["database"], 1)
        except SQLAlchemyError as exc:
            log.warning("metrics: database unavailable (%s)", exc.__class__.__name__)
            up.add_metric(["database"], 0)
        else:
            yield GaugeMetricFamily(
                "webhooks_events_failed",
                f"Events now failed (dead letter), counted up to {COUNT_CAP + 1} (more reads as that)",
                value=failed,
            )
            age = 0.0
            if oldest is not None:
                oldest = aware(oldest)
                age = max(0.0, (datetime.now(UTC) - oldest).total_seconds())
            yield GaugeMetricFamily(
                "webhooks_oldest_pending_age_seconds",
                "Age of the oldest event not yet processed, ignored or failed (0 when none)",
                value=age,
            )
            yield from _forwarding(forwarding, holding, datetime.now(UTC))
        try:
            depth = sum(queue.count for queue in self.rt.queue.queues)
            up.add_metric(["redis"], 1)
            if waiting is not None:
                depth = waiting
        except Exception as exc:  # a scrape must answer whatever Redis does
            log.warning("metrics: Redis unavailable (%s)", exc.__class__.__name__)
            up.add_metric(["redis"], 0)
        else:
            yield GaugeMetricFamily("webhooks_queue_depth", "Jobs waiting in the queue (not yet started)", value=depth)
        yield GaugeMetricFamily(
            "webhooks_config_version",
            "The runtime configuration version the scraped process holds (every process reaches the newest within 1 s)",
            value=getattr(self.rt, "config_version", 0),
        )
        yield up


def _forwarding(found: list[Backlog], holding: list[Held], now: datetime) -> Iterator[Metric]:
    """Per configured destination (``webhooks.forward.backlog``): its backlog and its state; per
    name with held deliveries, how many (and a removed name's pending and age, under its name)."""
    from webhooks.forward.backlog import PAUSED

    families = {
        "pending": GaugeMetricFamily(
            "webhooks_forward_pending", "Deliveries waiting to be sent, by destination", labels=["destination"]
        ),
        "age": GaugeMetricFamily(
            "webhooks_forward_oldest_pending_age_seconds",
            "Age of the destination's oldest pending delivery (0 when none)",
            labels=["destination"],
        ),
        "open": GaugeMetricFamily(
            "webhooks_forward_circuit_open", "1 while the destination's circuit is open", labels=["destination"]
        ),
        "paused": GaugeMetricFamily(
            "webhooks_forward_paused",
            "1 while the destination is paused (an operator, or a 410)",
            labels=["destination"],
        ),
        "held": GaugeMetricFamily(
            "webhooks_forward_held",
            "Deliveries no configured destination may send (removed, or configured again at another URL)"
            " until an operator adopts or fails them, by destination name",
            labels=["destination"],
        ),
    }
    for b in found:
        families["pending"].add_metric([b.name], b.pending)
        families["age"].add_metric([b.name], b.oldest_pending_seconds or 0.0)
        families["open"].add_metric([b.name], 0 if b.opened_at is None else 1)
        families["paused"].add_metric([b.name], 1 if b.state == PAUSED else 0)
    configured = {b.name for b in found}
    for h in holding:
        families["held"].add_metric([h.name], h.pending)
        if h.name not in configured:  # a configured name's pending already counts them
            age = 0.0 if h.oldest_pending_at is None else max(0.0, (now - h.oldest_pending_at).total_seconds())
            families["pending"].add_metric([h.name], h.pending)
            families["age"].add_metric([h.name], age)
    yield from families.values()


def exposition(rt: Service) -> tuple[bytes, str]:
    """The scrape body and its content type."""
    registry = CollectorRegistry()
    if config.metrics_dir():
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:  # one process (tests, a bare `flask run`): its own metrics
        for collector in (
            DELIVERIES,
            REJECTIONS,
            ENQUEUE_FAILURES,
            ATTEMPTS,
            DURATION,
            JOB_ERRORS,
            RECOVERIES,
            RATE_LIMIT_FAILURES,
            ADMIN_AUTH_FAILURES,
            FORWARD_ATTEMPTS,
            FORWARD_DURATION,
        ):
            registry.register(collector)
    registry.register(ServiceCollector(rt))
    return generate_latest(registry), CONTENT_TYPE_LATEST
