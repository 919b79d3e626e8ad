"""The per-endpoint rate limit: one budget for the whole service on Redis, one per process on the
embedded default, and a Redis outage that never refuses a delivery for the limiter's sake."""

from __future__ import annotations

import time
from itertools import cycle

import prometheus_client
import redis
from flask import Flask

from tests.conftest import base_config, free_port, make_app, rows, stripe_event, stripe_headers, wait_until
from webhooks import ratelimit

RATE = 5


def limited(database_url: str, **extra: str) -> Flask:
    config = base_config(database_url, **extra)
    config["ENDPOINTS"]["stripe"]["rate_limit"] = RATE
    return make_app(config)


def burst(apps: list[Flask], first: int, n: int) -> list[int]:
    """``n`` signed deliveries (fresh event ids from ``first``) spread over ``apps`` in turn; their statuses."""
    deliveries = [stripe_event(f"evt_rl_{first + k}") for k in range(n)]
    signed = [(body, stripe_headers(body)) for body in deliveries]
    clients = cycle([app.test_client() for app in apps])
    return [next(clients).post("/webhooks/stripe", data=body, headers=headers).status_code for body, headers in signed]


def failures() -> float:
    return prometheus_client.REGISTRY.get_sample_value("webhooks_rate_limit_failures_total") or 0.0


def test_two_app_instances_on_one_redis_share_one_budget(sqlite_url: str, redis_url: str) -> None:
    apps = [limited(sqlite_url, REDIS_URL=redis_url), limited(sqlite_url, REDIS_URL=redis_url)]
    bucket = redis.Redis.from_url(redis_url)
    attempts: list[tuple[float, list[int]]] = []

    def exact_window() -> list[int] | None:
        """A burst of 10 from a full bucket; its statuses when it fit in the time one token takes to refill."""
        bucket.delete(ratelimit.key("stripe"))
        started = time.monotonic()
        statuses = burst(apps, 100 * len(attempts), 2 * RATE)
        elapsed = time.monotonic() - started
        attempts.append((elapsed, statuses))
        accepted = statuses.count(200)
        # Whatever the pace: the full bucket, plus what refilled meanwhile, and never per instance.
        assert RATE <= accepted <= RATE + int(elapsed * RATE), (elapsed, statuses)
        assert set(statuses) <= {200, 429}, statuses
        return statuses if elapsed * RATE < 1 else None  # no token could refill: exactly RATE

    statuses = wait_until(exact_window, timeout=120)
    # In order: the first RATE pass (both instances' turns), then both instances refuse.
    assert statuses == [200] * RATE + [429] * RATE, attempts
    stored = rows(apps[0], "SELECT count(*) FROM events")[0][0]
    assert stored == sum(s.count(200) for _, s in attempts)


def test_the_embedded_default_limits_each_process_on_its_own(sqlite_url: str) -> None:
    apps = [limited(sqlite_url), limited(sqlite_url)]
    for app in apps:  # a stopped clock: no token refills during the test
        app.extensions["webhooks_rate_limits"].clock = lambda: 1000.0
    assert burst(apps, 0, 2 * RATE) == [200] * (2 * RATE)  # a budget of RATE each
    assert burst(apps, 50, 2) == [429, 429]


def test_a_redis_outage_lets_deliveries_through_on_the_process_bucket(sqlite_url: str) -> None:
    app = limited(sqlite_url, REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    limits = app.extensions["webhooks_rate_limits"]
    now = [1000.0]
    limits.clock = lambda: now[0]
    before = failures()
    statuses = burst([app], 0, RATE + 1)
    # Stored (the sweeper queues them once Redis is back), never a 500; the process's bucket limits.
    assert statuses == [200] * RATE + [429], statuses
    assert failures() == before + 1  # Redis was tried once, then left alone for PAUSE seconds
    now[0] += ratelimit.PAUSE + 1 / RATE
    assert burst([app], 50, 1) == [200]  # Redis tried again (still down): the refilled local token
    assert failures() == before + 2
