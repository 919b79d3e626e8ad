"""The per-endpoint rate limit: one budget for the whole service on Redis, one per process on the
embedded default, and a Redis outage that never refuses a delivery for the limiter's sake. An
endpoint whose kind signs nothing is limited by default, per sender address first."""

from __future__ import annotations

import time
from itertools import cycle

import prometheus_client
import pytest
import redis
from flask import Flask

from tests.conftest import base_config, free_port, make_app, rows, stripe_event, stripe_headers, wait_until
from webhooks.configuration.settings import UNSIGNED_RATE_LIMIT, UNSIGNED_SENDER_RATE_LIMIT
from webhooks.receiver import ratelimit

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


# -- an endpoint whose kind signs nothing (Mollie classic): limited by default, per sender first ------

MOLLIE_KEY = "test_dHar4XY7LxsDOtmnkVtjNVWXLSlXsM"
ATTACKER, MOLLIE, OTHER = "203.0.113.7", "198.51.100.9", "192.0.2.44"


def classic_mollie(database_url: str, **extra: str) -> Flask:
    endpoints = {"mollie": {"provider": "mollie", "api_key": MOLLIE_KEY}}  # no limits configured: the defaults
    return make_app(base_config(database_url, WEBHOOKS_TRUSTED_PROXIES="1", ENDPOINTS=endpoints, **extra))


def nudges(app: Flask, sender: str, first: int, n: int) -> list[int]:
    """``n`` nudges naming fresh payments, sent through one trusted proxy on behalf of ``sender``."""
    client = app.test_client()
    return [
        client.post(
            "/webhooks/mollie",
            data=f"id=tr_rl{first + k}".encode(),
            headers={"X-Forwarded-For": f"10.9.9.9, {sender}"},  # the first is the sender's own claim
            environ_base={"REMOTE_ADDR": "127.0.0.1"},
        ).status_code
        for k in range(n)
    ]


def test_a_kind_that_signs_nothing_limits_each_sender_then_the_endpoint(sqlite_url: str) -> None:
    app = classic_mollie(sqlite_url)
    app.extensions["webhooks_rate_limits"].clock = lambda: 1000.0  # a stopped clock: no token refills
    flood = nudges(app, ATTACKER, 0, 60)
    assert flood == [200] * int(UNSIGNED_SENDER_RATE_LIMIT) + [429] * (60 - int(UNSIGNED_SENDER_RATE_LIMIT))
    answer = app.test_client().post(
        "/webhooks/mollie",
        data=b"id=tr_rlx",
        headers={"X-Forwarded-For": ATTACKER},
        environ_base={"REMOTE_ADDR": "127.0.0.1"},
    )
    assert answer.get_json() == {"error": "rate_limited"} and int(answer.headers["Retry-After"]) >= 1
    # The refused flood spent the attacker's budget only: Mollie's own address still gets through.
    assert nudges(app, MOLLIE, 100, 5) == [200] * 5
    # The endpoint's budget bounds all senders together (20 by default: 10 + 5 spent, 5 left).
    left = int(UNSIGNED_RATE_LIMIT - UNSIGNED_SENDER_RATE_LIMIT - 5)
    assert nudges(app, OTHER, 200, left + 1) == [200] * left + [429]
    stored = rows(app, "SELECT count(*) FROM events WHERE endpoint = 'mollie'")[0][0]
    assert stored == UNSIGNED_RATE_LIMIT


def test_a_senders_budget_is_read_from_the_trusted_proxys_address_only(sqlite_url: str) -> None:
    app = classic_mollie(sqlite_url)
    app.extensions["webhooks_rate_limits"].clock = lambda: 1000.0
    client = app.test_client()
    # The sender writes a fresh address of its own into X-Forwarded-For each time: never believed.
    statuses = [
        client.post(
            "/webhooks/mollie",
            data=f"id=tr_spoof{k}".encode(),
            headers={"X-Forwarded-For": f"10.0.0.{k}, {ATTACKER}"},
            environ_base={"REMOTE_ADDR": "127.0.0.1"},
        ).status_code
        for k in range(12)
    ]
    assert statuses.count(200) == UNSIGNED_SENDER_RATE_LIMIT and statuses[-1] == 429


def test_this_processs_sender_buckets_are_bounded(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ratelimit, "MAX_SENDERS", 3)
    app = classic_mollie(sqlite_url)
    limits = app.extensions["webhooks_rate_limits"]
    limits.clock = lambda: 1000.0
    for n in range(6):
        assert nudges(app, f"192.0.2.{n}", 10 * n, 1) == [200]
    assert list(limits.senders) == [("mollie", f"192.0.2.{n}") for n in (3, 4, 5)]  # the least recent forgotten


def test_on_redis_a_senders_bucket_is_shared_and_expires(sqlite_url: str, redis_url: str) -> None:
    apps = [classic_mollie(sqlite_url, REDIS_URL=redis_url), classic_mollie(sqlite_url, REDIS_URL=redis_url)]
    bucket = redis.Redis.from_url(redis_url)
    key = ratelimit.sender_key("mollie", ATTACKER)
    bucket.delete(key)
    assert nudges(apps[0], ATTACKER, 0, 1) == nudges(apps[1], ATTACKER, 1, 1) == [200]
    tokens = float(bucket.hget(key, "tokens") or 0)
    assert UNSIGNED_SENDER_RATE_LIMIT - 2 <= tokens < UNSIGNED_SENDER_RATE_LIMIT - 1  # one budget for both
    # Redis forgets an idle sender within seconds: a flood of addresses holds little memory.
    assert 0 < bucket.pttl(key) <= 1000 * (1 + 1)
    assert bucket.exists(ratelimit.sender_key("mollie", MOLLIE)) == 0


@pytest.mark.redis
def test_two_deployments_on_one_redis_share_no_key(sqlite_url: str, redis_url: str) -> None:
    """Seams finding 7: every Redis key that is not RQ's own carries ``WEBHOOKS_QUEUE`` as its
    prefix. A client throttled by one deployment's admin login is not throttled by the other's,
    and an endpoint's rate limit bucket is each deployment's own."""
    import base64

    from webhooks.admin.throttle import FREE

    client = redis.Redis.from_url(redis_url)
    alpha = limited(sqlite_url, REDIS_URL=redis_url, WEBHOOKS_QUEUE="alpha")
    beta = limited(sqlite_url, REDIS_URL=redis_url, WEBHOOKS_QUEUE="beta")
    wrong = {"Authorization": "Basic " + base64.b64encode(b"admin:not-the-password").decode()}
    codes = [alpha.test_client().get("/admin/api/events", headers=wrong).status_code for _ in range(FREE + 1)]
    assert codes[-1] == 429, codes
    assert beta.test_client().get("/admin/api/events", headers=wrong).status_code == 401  # not throttled there
    assert burst([alpha], 0, 1) == [200]
    assert burst([beta], 1, 1) == [200]
    ours = [k.decode() for k in client.scan_iter() if not k.startswith(b"rq:")]
    assert ours and all(k.startswith(("alpha:", "beta:")) for k in ours), ours
    assert client.exists(ratelimit.key("stripe", "alpha")) and client.exists(ratelimit.key("stripe", "beta"))
