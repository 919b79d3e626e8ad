"""Prometheus metrics, right under several gunicorn processes and workers.

Counters and the histogram live in each process; with ``PROMETHEUS_MULTIPROC_DIR`` set (the
service's entry points set it before anything imports ``prometheus_client``: ``webhooks.process_setup``)
each process writes its samples to files there and ``/metrics`` adds them up, so processes on one
host (gunicorn's, the workers') are scraped as one. The gauges that describe the whole service —
events ``failed``, the oldest event still pending, queue depth — are read from the database and
Redis at scrape time, so they are right whichever instance is scraped.

Every label value is bounded: endpoint names come from the configuration (unknown names are
counted as ``unknown/*``), reasons and outcomes are the product's own words.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, cast

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from webhooks.timestamps import aware
from webhooks.vocabulary import Status

if TYPE_CHECKING:
    from prometheus_client import Metric
    from sqlalchemy import Engine

    from webhooks.forward.backlog import Backlog, Held
    from webhooks.forward.destinations import Destination

log = logging.getLogger(__name__)
UNKNOWN = "unknown/*"  # every endpoint name that is not configured (as in rejection_counts)
MULTIPROC = "PROMETHEUS_MULTIPROC_DIR"
PENDING = (Status.RECEIVED, Status.QUEUED, Status.PROCESSING)

DELIVERIES = Counter(
    "webhooks_deliveries",
    "Deliveries by endpoint and outcome (stored, duplicate, rejected, unavailable)",
    ["endpoint", "outcome"],
)
REJECTIONS = Counter(
    "webhooks_rejections", "Refused or replayed deliveries by endpoint and reason", ["endpoint", "reason"]
)
ENQUEUE_FAILURES = Counter("webhooks_enqueue_failures", "Jobs Redis refused (left for the sweeper)", ["endpoint"])
ATTEMPTS = Counter(
    "webhooks_processing_attempts",
    "Processing attempts by endpoint and outcome (processed, ignored, error, failed)",
    ["endpoint", "outcome"],
)
DURATION = Histogram(
    "webhooks_processing_seconds",
    "Time one processing attempt took",
    ["endpoint"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
JOB_ERRORS = Counter(
    "webhooks_job_errors",
    "Jobs a worker could not run, failed before their attempt record (import, deserialize, other)",
    ["reason"],
)
for _reason in ("import", "deserialize", "other"):  # exported at 0: an alert sees the first one
    JOB_ERRORS.labels(_reason)
RECOVERIES = Counter("webhooks_sweeper_recoveries", "Stranded events the sweeper queued again")
RATE_LIMIT_FAILURES = Counter(
    "webhooks_rate_limit_failures", "Rate-limit checks Redis could not answer (the per-process bucket decided)"
)
ADMIN_AUTH_FAILURES = Counter(
    "webhooks_admin_auth_failures",
    "Console requests refused for their credentials: unauthorized (401, a wrong password counted), "
    "throttled (429, the client is waiting out its wrong passwords)",
    ["outcome"],
)
FORWARD_ATTEMPTS = Counter(
    "webhooks_forward_attempts",
    "Forwarded requests and deliveries settled, by destination and outcome (delivered, error, throttled, gone,"
    " probe_failed, superseded)",
    ["destination", "outcome"],
)
FORWARD_DURATION = Histogram(
    "webhooks_forward_request_seconds",
    "Time one forwarded request took, to its answer or its error",
    ["destination"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)


def forwarded(destination: str, outcome: str, seconds: float) -> None:
    """Count one settled forwarding attempt (destination names come from the configuration)."""
    FORWARD_ATTEMPTS.labels(destination, outcome).inc()
    if outcome != "superseded":
        FORWARD_DURATION.labels(destination).observe(seconds)


def process_exited(pid: int) -> None:
    """gunicorn's ``child_exit``: drop the live-only samples of a process that is gone."""
    if os.environ.get(MULTIPROC):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]


class _Endpoints(Protocol):
    @property
    def endpoints(self) -> Mapping[str, object]: ...
    @property
    def destinations(self) -> Mapping[str, object]: ...


class _Counted(Protocol):
    @property
    def count(self) -> int: ...


class _Queue(Protocol):
    @property
    def queues(self) -> Sequence[_Counted]: ...


class Service(Protocol):
    """What the metrics read of a runtime (``webhooks.runtime.Runtime``): its endpoints' names,
    its database and the depth of its queue (typed here: no import of the runtime or the queue)."""

    @property
    def settings(self) -> _Endpoints: ...
    @property
    def engine(self) -> Engine: ...
    @property
    def queue(self) -> _Queue: ...


# Each counter's child per label values, as ``labels()`` returns it (which checks the values and
# looks the child up under the counter's lock on every call). Bounded as the label values are.
_children: dict[tuple[int, tuple[str, ...]], Any] = {}


def child(counter: Counter, *values: str) -> Any:
    """``counter.labels(*values)``, looked up once per process."""
    key = (id(counter), values)
    found = _children.get(key)
    if found is None:
        found = _children[key] = counter.labels(*values)
    return found


def endpoint_label(rt: Service, name: str) -> str:
    return name if name in rt.settings.endpoints else UNKNOWN


def failed_query() -> Any:
    """The failed events, counted up to ``COUNT_CAP + 1`` entries of ``ix_events_status_feed``:
    a scrape costs the same with ten failed events or ten million (an alert fires on any)."""
    from sqlalchemy import literal, select

    from webhooks.models import Event, capped_count

    return capped_count(select(literal(1)).where(Event.status == Status.FAILED))


def waiting_query() -> Any:
    """The ``queued`` rows, capped like ``failed_query`` (from ``ix_events_unfinished``): the queue's
    depth where this process queues nothing (``webhooks serve``'s web processes hand the rows over
    to the worker process, whose queue is in its own memory)."""
    from sqlalchemy import literal, select

    from webhooks.models import Event, capped_count

    return capped_count(select(literal(1)).where(Event.status == Status.QUEUED))


def oldest_query() -> Any:
    """When the oldest pending event arrived: one seek per status at the low end of its range of
    ``ix_events_status_feed`` (an ``IN`` over the statuses would read every pending row)."""
    from sqlalchemy import func, select, union_all

    from webhooks.models import Event

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
        from webhooks.models import COUNT_CAP

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
    if os.environ.get(MULTIPROC):
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
