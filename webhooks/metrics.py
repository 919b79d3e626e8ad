"""Prometheus metrics, right under several gunicorn processes and workers.

Counters and the histogram live in each process; with ``PROMETHEUS_MULTIPROC_DIR`` set (the
service's entry points set it before anything imports ``prometheus_client``: ``webhooks.service.process_setup``)
each process writes its samples to files there and ``/metrics`` adds them up, so processes on one
host (gunicorn's, the workers') are scraped as one. The gauges that describe the whole service —
events ``failed``, the oldest event still pending, queue depth — are read from the database and
Redis at scrape time, so they are right whichever instance is scraped.

Every label value is bounded: endpoint names come from the configuration (unknown names are
counted as ``unknown/*``), reasons and outcomes are the product's own words.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import Counter, Histogram

from webhooks.vocabulary import Status

if TYPE_CHECKING:
    from sqlalchemy import Engine


log = logging.getLogger(__name__)
UNKNOWN = "unknown/*"  # every endpoint name that is not configured (as in rejection_counts)
MULTIPROC = "PROMETHEUS_MULTIPROC_DIR"
PENDING = (Status.RECEIVED, Status.QUEUED, Status.PROCESSING)

DELIVERIES = Counter(
    "webhooks_deliveries",
    "Deliveries by endpoint and outcome (stored, duplicate, rejected, unavailable)",
    ["endpoint", "outcome"],
)
FORWARD_FILTERED = Counter(
    "webhooks_forward_filtered", "Events a destination's filter refused (no delivery)", ["destination"]
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
CONFIG_REJECTED = Counter(
    "webhooks_config_rejected", "Database endpoints or destinations left out of a snapshot (invalid, unreadable)"
)
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
    from webhooks.configuration import settings as config

    if config.metrics_dir():
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]


class _Kind(Protocol):
    @property
    def kind(self) -> str: ...


class _Endpoints(Protocol):
    @property
    def endpoints(self) -> Mapping[str, _Kind]: ...
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
    def file_settings(self) -> _Endpoints: ...
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
    """The ``endpoint`` label of ``name``'s series: the name of an endpoint the file defines; for
    an endpoint of the database (#32: a platform may create 10 000) ``<kind>:*``, one series per
    kind, so ``/metrics`` never grows with them (the admin API and the console count per name);
    ``UNKNOWN`` for a name nothing configures."""
    if name in rt.file_settings.endpoints:
        return name
    found = rt.settings.endpoints.get(name)
    return UNKNOWN if found is None else f"{found.kind}:*"
