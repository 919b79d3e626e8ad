"""The sweeper (outbox recovery): events stranded on their way through the queue are queued again.

Rows older than the sweep age: ``received`` ones never reached Redis; ``queued`` ones whose job is
gone lost it (a flushed or restarted Redis); ``processing`` ones that no transaction holds were
abandoned by a killed worker: requeued, or ``failed`` once every attempt is spent (an event that
kills its worker cannot loop). Which rows are stranded is the store's to say (``Store.abandoned``,
``Store.stranded``); which jobs are live is the queue's. Safe anywhere, any time: enqueue is
idempotent and processing claims each row with a token.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from webhooks.metrics import RECOVERIES
from webhooks.runtime import Runtime


def sweep(rt: Runtime, now: datetime | None = None, limit: int = 20_000, age: float | None = None) -> int:
    """Re-enqueue the events stranded older than ``age`` s (default ``WEBHOOKS_SWEEP_AGE``); how many."""
    age = rt.settings.sweep_age if age is None else age
    cutoff = (now or datetime.now(UTC)) - timedelta(seconds=age)
    swept = 0
    for endpoint, event_id in rt.store.abandoned(cutoff, limit, rt.settings.max_attempts, datetime.now(UTC)):
        rt.queue.requeue(endpoint, event_id, force=True)
        swept += 1
        RECOVERIES.inc()
    # Every stale row, a page of jobs checked per Redis round trip: under a backlog most `queued`
    # rows have live jobs, and a stranded row must not hide behind them.
    for page in rt.store.stranded(cutoff, limit):
        # These rows are not claimed yet: a job that says `started` for one of them past the
        # sweep age belongs to a worker killed between taking it and claiming the row.
        live = rt.queue.live([key for key, _ in page], unclaimed=True)
        for (key, status), is_live in zip(page, live, strict=True):
            if is_live:
                continue
            rt.queue.requeue(*key, force=True)  # claim tokens make a race harmless
            swept += 1
            RECOVERIES.inc()
            rt.store.requeued(key, status, datetime.now(UTC))
    return swept
