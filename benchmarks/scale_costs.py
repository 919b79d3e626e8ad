"""What ``scale.py`` weighs besides the console: the sweeper's and ``/metrics``' cost per run, the
storage an event takes by kind, table and index sizes, and a side prober that times one insert
every ``PROBE_EVERY`` seconds on its own connection (how long ingest could be blocked).
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from scale_fill import KINDS
from scale_queries import PLANS, captured, percentile, plans

from webhooks.runtime import Runtime
from webhooks.service.collector import ServiceCollector
from webhooks.worker.sweeper import sweep

PROBE_EVERY = 0.02
STORAGE_SAMPLE = 20_000  # events a kind copied into its own table to weigh it


def per_run(rt: Runtime, name: str, work: Callable[[], Any], runs: int, plan_path: Path | None) -> dict[str, Any]:
    """``work`` ``runs`` times: p50/p95 ms, and the shared blocks its statements touch (their
    plans, written to ``plan_path``)."""
    with captured(rt.engine) as statements:
        work()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        work()
        times.append((time.perf_counter() - started) * 1000)
    blocks = plans(rt.engine, statements, plan_path) if rt.engine.dialect.name == "postgresql" else 0
    return {
        "cost": name,
        "p50_ms": round(statistics.median(times), 2),
        "p95_ms": round(percentile(times, 0.95), 2),
        "statements": len(statements),
        "blocks": blocks,
    }


def background(rt: Runtime, runs: int, keep_plans: bool) -> list[dict[str, Any]]:
    """The sweeper (``sweep``: abandoned + stranded pages) and the metrics' database gauges."""
    jobs: dict[str, Callable[[], Any]] = {
        "sweeper": lambda: sweep(rt),
        "metrics": lambda: list(ServiceCollector(rt).collect()),
    }
    return [
        per_run(rt, name, job, runs, PLANS / f"pg-{name}.txt" if keep_plans else None) for name, job in jobs.items()
    ]


def sizes(url: str) -> dict[str, Any]:
    """Per table: heap, TOAST, indexes and total bytes; per index of ``events``: its bytes."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            tables = conn.execute(
                sa.text(
                    "SELECT c.relname, pg_relation_size(c.oid), coalesce(pg_total_relation_size(c.reltoastrelid), 0), "
                    "pg_indexes_size(c.oid), pg_total_relation_size(c.oid) FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'r'"
                )
            ).all()
            indexes = conn.execute(
                sa.text(
                    "SELECT indexrelname, pg_relation_size(indexrelid) FROM pg_stat_user_indexes "
                    "WHERE relname = 'events'"
                )
            ).all()
            rows = {t: conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one() for t in ("events", "attempts")}
            dead = conn.execute(
                sa.text("SELECT n_live_tup, n_dead_tup FROM pg_stat_user_tables WHERE relname = 'events'")
            ).one()
    finally:
        engine.dispose()
    return {
        "tables": {t: {"heap": h, "toast": s, "indexes": i, "total": a} for t, h, s, i, a in tables},
        "events_indexes": dict(indexes),  # type: ignore[arg-type]
        "rows": rows,
        "events_live_tuples": dead[0],
        "events_dead_tuples": dead[1],
    }


def storage(url: str) -> list[dict[str, Any]]:
    """Bytes per event by endpoint: up to ``STORAGE_SAMPLE`` of its events copied into a table
    made ``LIKE events INCLUDING ALL`` (same columns, TOAST and indexes), vacuumed, weighed whole
    (``pg_total_relation_size``) and split into heap, TOAST and indexes. Adyen's batch bodies
    (``bodies``) are added per event, apportioned from the table's whole size."""
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    found = []
    try:
        with engine.connect() as conn:
            for kind in KINDS:
                conn.execute(sa.text("DROP TABLE IF EXISTS scale_weigh"))
                conn.execute(sa.text("CREATE TABLE scale_weigh (LIKE events INCLUDING ALL)"))
                n = conn.execute(
                    sa.text("INSERT INTO scale_weigh SELECT * FROM events WHERE endpoint = :e LIMIT :k"),
                    {"e": kind.endpoint, "k": STORAGE_SAMPLE},
                ).rowcount
                conn.execute(sa.text("VACUUM ANALYZE scale_weigh"))
                heap, toast, index, total = conn.execute(
                    sa.text(
                        "SELECT pg_relation_size(c.oid), coalesce(pg_total_relation_size(c.reltoastrelid), 0), "
                        "pg_indexes_size(c.oid), pg_total_relation_size(c.oid) FROM pg_class c "
                        "WHERE relname = 'scale_weigh'"
                    )
                ).one()
                payload = conn.execute(sa.text("SELECT avg(length(payload)) FROM scale_weigh")).scalar_one()
                extra = 0.0
                if kind.kind == "adyen":
                    bodies = conn.execute(sa.text("SELECT pg_total_relation_size('bodies')")).scalar_one()
                    events = conn.execute(sa.text("SELECT count(*) FROM events WHERE endpoint = 'adyen'")).scalar_one()
                    extra = bodies / max(1, events)
                found.append(
                    {
                        "endpoint": kind.endpoint,
                        "sampled": n,
                        "payload_bytes": round(float(payload or 0)),
                        "heap": round(heap / n),
                        "toast": round(toast / n),
                        "indexes": round(index / n),
                        "bodies": round(extra),
                        "total": round(total / n + extra),
                    }
                )
            conn.execute(sa.text("DROP TABLE scale_weigh"))
    finally:
        engine.dispose()
    return found


LOCK_EVERY = 0.01  # seconds between looks for statements waiting on a lock


class Prober(threading.Thread):
    """Inserts one event row every ``PROBE_EVERY`` s on its own connection (autocommit) and
    keeps each insert's time: the longest is the longest an insert was blocked."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
        self.times: list[float] = []
        self.stopping = threading.Event()
        self.tag = uuid.uuid4().hex[:8]
        self.locks = LockWatch(url, self.stopping)

    def start(self) -> None:
        super().start()
        self.locks.start()

    def run(self) -> None:
        insert = sa.text(
            "INSERT INTO events (endpoint, event_id, kind, event_type, status, attempts, received_at, status_at,"
            " payload, headers, scheme) VALUES ('stripe', :id, 'stripe', 'probe', 'processed', 1, :at, :at,"
            " '\\x7b7d', '{}', 'stripe')"
        )
        with self.engine.connect() as conn:
            n = 0
            while not self.stopping.is_set():
                n += 1
                started = time.perf_counter()
                conn.execute(insert, {"id": f"evt_probe_{self.tag}_{n}", "at": datetime.now(UTC)})
                self.times.append((time.perf_counter() - started) * 1000)
                self.stopping.wait(PROBE_EVERY)
        self.engine.dispose()

    def stop(self) -> dict[str, Any]:
        self.stopping.set()
        self.join()
        self.locks.join()
        waits = list(self.locks.waits.values())
        return {
            "probes": len(self.times),
            "p99_ms": round(percentile(self.times, 0.99), 1) if self.times else None,
            "max_ms": round(max(self.times), 1) if self.times else None,
            "lock_waits": len(waits),
            "lock_wait_max_ms": round(max((last - first for first, last in waits), default=0.0) * 1000, 1),
        }


class LockWatch(threading.Thread):
    """Samples ``pg_stat_activity`` every ``LOCK_EVERY`` s for statements waiting on a lock
    (``wait_event_type = 'Lock'``): each wait's first and last sighting, by backend and statement
    start, so a slow insert that waited on a lock is told from one that waited on I/O."""

    def __init__(self, url: str, stopping: threading.Event) -> None:
        super().__init__(daemon=True)
        self.engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
        self.stopping = stopping
        self.waits: dict[tuple[int, Any], tuple[float, float]] = {}

    def run(self) -> None:
        query = sa.text(
            "SELECT pid, query_start FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
        with self.engine.connect() as conn:
            while not self.stopping.is_set():
                seen = time.monotonic()
                for pid, started in conn.execute(query):
                    first, _ = self.waits.get((pid, started), (seen, seen))
                    self.waits[(pid, started)] = (first, seen)
                self.stopping.wait(LOCK_EVERY)
        self.engine.dispose()
