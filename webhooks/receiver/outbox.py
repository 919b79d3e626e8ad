"""Enqueue or leave for the sweeper, written once: the jobs of committed events go to Redis, and
those Redis refuses go back to ``received`` (``Store.leave_for_sweeper``) for the sweeper to
queue once Redis is back. The receiver's new events and a replay's marked ones both come here."""

from __future__ import annotations

import collections
import logging
from datetime import UTC, datetime

import redis

from webhooks.metrics import ENQUEUE_FAILURES, endpoint_label
from webhooks.runtime import Runtime
from webhooks.store.base import CHUNK_ROWS, Key

log = logging.getLogger("webhooks.outbox")  # the name the docs and log filters know


def enqueue(rt: Runtime, events: list[Key], *, fresh: bool = False) -> bool:
    """Queue the jobs of committed ``events``; False when Redis refused (the rest left for the sweeper).

    New events (the receiver) are queued ``CHUNK_ROWS`` a Redis round trip, a job only where none
    exists; ``fresh`` (a replay) enqueues a fresh job for each, replacing a finished one.
    """
    done = 0
    try:
        if fresh:
            for endpoint, event_id in events:
                rt.queue.requeue(endpoint, event_id)
                done += 1
        else:
            for done in range(0, len(events), CHUNK_ROWS):
                rt.queue.enqueue_many(events[done : done + CHUNK_ROWS])
    except redis.RedisError as exc:
        left = events[done:]
        log.warning("enqueue failed (%s): the sweeper queues %d event(s) later", exc.__class__.__name__, len(left))
        for endpoint, count in collections.Counter(endpoint for endpoint, _ in left).items():
            ENQUEUE_FAILURES.labels(endpoint_label(rt, endpoint)).inc(count)
        rt.store.leave_for_sweeper(left, datetime.now(UTC))
        return False
    return True
