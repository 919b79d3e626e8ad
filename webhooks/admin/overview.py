"""The console's overview: per endpoint, events received, requests rejected and processing
outcomes over the last hour (5-minute bars) and day (hourly bars), and the oldest pending age.

Every query reads one time range of an index (``ix_events_feed``, ``ix_rejections_received_at``,
``ix_attempts_finished_at``) grouped into at most 24 buckets in the database, so a page reads no
row outside the day; the pending age is two index seeks (``ix_events_unfinished``, of unfinished rows only).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Integer, cast, func, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from webhooks.tables.events import Attempt, Event, Rejection, unfinished
from webhooks.timestamps import aware
from webhooks.vocabulary import JOB_ERROR, Status

# (name, bucket width, buckets): the two windows an operator compares.
WINDOWS = (("hour", timedelta(minutes=5), 12), ("day", timedelta(hours=1), 24))
OUTCOMES = ("processed", "ignored", "error")  # ``attempts.status``
PENDING = (Status.RECEIVED, Status.QUEUED)
SERIES = ("received", "rejected", *OUTCOMES)


@dataclass
class Plot:
    """One window of one endpoint: counts per bucket for each series, oldest bucket first."""

    start: datetime
    width: timedelta
    counts: dict[str, list[int]] = field(default_factory=dict)

    def total(self, series: str) -> int:
        return sum(self.counts.get(series, []))


@dataclass
class Overview:
    now: datetime
    plots: dict[str, dict[str, Plot]]  # endpoint → window name → plot
    oldest_pending: datetime | None
    job_errors: int = 0  # attempts in the last day of jobs a worker could not run (webhooks.worker.job_errors)

    def pending_age(self) -> float | None:
        """Seconds the oldest pending (received or queued) event has waited."""
        return None if self.oldest_pending is None else (self.now - aware(self.oldest_pending)).total_seconds()


def _bucket(session: Session, column: Any, start: datetime, width: timedelta) -> ColumnElement[Any]:
    """The bucket number of ``column`` from ``start``, in the database (each dialect its own epoch)."""
    seconds = int(width.total_seconds())
    if session.get_bind().dialect.name == "postgresql":
        return cast(func.floor((func.extract("epoch", column) - start.timestamp()) / seconds), Integer)
    # SQLite keeps UTC text; julianday() reads it as fractional days (2440587.5 is the Unix epoch).
    return cast(((func.julianday(column) - 2440587.5) * 86400.0 - start.timestamp()) / seconds, Integer)


def _counted(
    session: Session,
    column: Any,
    endpoint: Any,
    start: datetime,
    width: timedelta,
    *where: ColumnElement[bool],
    by: Any = None,
) -> Iterable[Any]:
    bucket = _bucket(session, column, start, width).label("bucket")
    keys = [endpoint, bucket] + ([by] if by is not None else [])
    # Grouped by the bucket first: grouped by ``endpoint`` first, SQLite walks the whole primary
    # key (for its order) instead of the window's range of the time index.
    query = select(*keys, func.count()).where(column >= start, *where).group_by(bucket, *keys[:1], *keys[2:])
    return session.execute(query)


def build(session: Session, endpoints: Iterable[str], now: datetime) -> Overview:
    """The overview at ``now``: ``endpoints`` (the configured ones) each get a row, even if idle."""
    plots: dict[str, dict[str, Plot]] = {}
    names = sorted(endpoints)
    for window, width, buckets in WINDOWS:
        start = now - width * buckets
        for name in names:
            plots.setdefault(name, {})[window] = Plot(start, width, {s: [0] * buckets for s in SERIES})

        def add(name: str, series: str, bucket: int, n: int, window: str = window, buckets: int = buckets) -> None:
            bucket = min(bucket, buckets - 1)  # received while this page was being read: the latest bar
            if name in plots and bucket >= 0:
                plots[name][window].counts[series][bucket] += n

        for name, bucket, n in _counted(session, Event.received_at, Event.endpoint, start, width):
            add(name, "received", bucket, n)
        for name, bucket, n in _counted(session, Rejection.received_at, Rejection.endpoint, start, width):
            add(name, "rejected", bucket, n)
        for name, bucket, status, n in _counted(
            session, Attempt.finished_at, Attempt.endpoint, start, width, by=Attempt.status
        ):
            if status in OUTCOMES:
                add(name, status, bucket, n)
    # Jobs a worker could not run (an import error, unreadable job data) fail before any handler:
    # said here, not only in the error bars, since no handler of the operator's is at fault.
    day = now - timedelta(days=1)
    unrunnable = select(func.count()).where(Attempt.finished_at >= day, Attempt.error.startswith(JOB_ERROR))
    job_errors = session.scalar(unrunnable) or 0
    oldest = [session.scalar(select(func.min(Event.status_at)).where(Event.status == s, unfinished())) for s in PENDING]
    found = [aware(o) for o in oldest if o is not None]
    return Overview(now=now, plots=plots, oldest_pending=min(found) if found else None, job_errors=job_errors)


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    series: str
    title: str


CHART_W, CHART_H = 240, 48


def bars(plot: Plot, stacked: tuple[str, ...]) -> tuple[list[Bar], int]:
    """SVG rectangles for ``stacked`` series of ``plot`` (the first at the bottom) and the scale's top."""
    buckets = len(plot.counts[stacked[0]])
    top = max(1, max(sum(plot.counts[s][i] for s in stacked) for i in range(buckets)))
    step = CHART_W / buckets
    out = []
    for i in range(buckets):
        base = float(CHART_H)
        at = plot.start + plot.width * i
        for series in stacked:
            n = plot.counts[series][i]
            if n:
                height = n / top * (CHART_H - 2)
                base -= height
                title = f"{at:%H:%M}Z +{int(plot.width.total_seconds() // 60)} min: {n} {series}"
                out.append(
                    Bar(round(i * step + 1, 2), round(base, 2), round(step - 1, 2), round(height, 2), series, title)
                )
    return out, top
