"""A live claim is visible (issue 30): a claimed row carries a lease (``claimed_until``), renewed
while a long provider call runs, and the sweeper never takes a row whose lease is live. A fetch
that drips past the sweep age ends with one attempt row per attempt, attempts within
``WEBHOOKS_MAX_ATTEMPTS``, and never ``failed`` (nor ``queued``) while it runs; an attempt that
outlives its lease marks nothing and says so in one log line; it leaves one attempt row."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask

from tests.conftest import PAYLOADS, base_config, drain, make_app, rows, runtime, stripe_headers, wait_until
from tests.fake_apis import serve
from tests.worker.test_refetch import METER
from webhooks.jobs.process import process_event
from webhooks.worker import claims
from webhooks.worker.sweeper import sweep

THIN = PAYLOADS / "stripe/v1.billing.meter.error_report_triggered__thin.json"
DRIP = 4.0  # seconds the fake Stripe API takes to answer: past the sweep age and the lease
MAX_ATTEMPTS = 3


class SlowStripe:
    """Stripe's API answering the meter slowly: the first ``slow`` calls drip for ``DRIP`` s."""

    def __init__(self, slow: int) -> None:
        self.calls = 0
        self.slow = slow
        self.answered = threading.Event()

    def route(self, method: str, path: str, query: Any, headers: Any, body: bytes) -> tuple[int, Any]:
        self.calls += 1
        if path == f"/v1/billing/meters/{METER['id']}":
            return 200, METER
        return 404, {"error": {"type": "invalid_request_error"}}

    def drip(self) -> float:
        return DRIP if self.calls <= self.slow else 0.0


def lease_app(url: str, api_base: str, **extra: str) -> Flask:
    config = base_config(
        url,
        STRIPE_TEST_KEY="sk_test_123",
        WEBHOOKS_MAX_ATTEMPTS=str(MAX_ATTEMPTS),
        WEBHOOKS_SWEEP_AGE="0.2",
        WEBHOOKS_JOB_TIMEOUT="1",  # with the grace below: a lease of 1.5 s, renewed every 0.5 s
        **extra,
    )
    config["ENDPOINTS"]["stripe"].update(api_key="env:STRIPE_TEST_KEY", api_base=api_base)
    return make_app(config)


@pytest.fixture
def short_leases(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(claims, "LEASE_GRACE", 0.5)


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """The database URL (and Redis for PostgreSQL) of each adapter."""
    if request.param == "sqlite":
        yield {"url": request.getfixturevalue("sqlite_url")}
    else:
        yield {"url": request.getfixturevalue("pg_url"), "REDIS_URL": request.getfixturevalue("redis_url")}


def deliver(app: Flask) -> str:
    body = THIN.read_bytes()
    assert app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200
    [(event_id,)] = rows(app, "SELECT event_id FROM events")
    return str(event_id)


def start_job(app: Flask, event_id: str) -> tuple[threading.Thread, dict[str, str]]:
    """The event's job on a thread of its own (as a worker runs it), while the test sweeps."""
    rt = runtime(app)
    result: dict[str, str] = {}

    def job() -> None:
        rt.bind()
        try:
            result["status"] = process_event("stripe", event_id)
        except Exception as exc:  # RQ would retry it: kept for the assertion's message
            result["status"] = f"raised {exc!r}"

    thread = threading.Thread(target=job)
    thread.start()
    return thread, result


def attempt_rows(app: Flask) -> list[tuple[int, str]]:
    return [(n, s) for n, s in rows(app, "SELECT number, status FROM attempts ORDER BY number")]


def test_a_fetch_that_drips_past_the_sweep_age_keeps_its_claim(database: dict[str, str], short_leases: None) -> None:
    api = SlowStripe(slow=1)
    with serve(api.route, api.drip) as base:
        extra = {k: v for k, v in database.items() if k != "url"}
        app = lease_app(database["url"], base, **extra)
        event_id = deliver(app)
        rt = runtime(app)
        thread, result = start_job(app, event_id)
        wait_until(lambda: api.calls == 1)  # the fetch is under way, the row claimed
        swept: list[int] = []
        seen: list[tuple[str, Any]] = []

        def sweep_while_running() -> bool:
            swept.append(sweep(rt))  # every pass past the sweep age: the row is 0.2 s old at once
            seen.extend(rows(app, "SELECT status, claimed_until FROM events"))
            return not thread.is_alive()

        wait_until(sweep_while_running, timeout=60, interval=0.1)
        seen.extend(rows(app, "SELECT status, claimed_until FROM events"))  # the job's end, marked
        drain(app)  # the delivery's own job: nothing left to do
    assert result == {"status": "processed"}
    assert sum(swept) == 0 and len(swept) > 1, swept
    # never failed (nor queued) while it ran: "processing" until the job marked it, "processed" after
    # (the job may mark the row between a pass's read and its look at the thread: more than one
    # "processed" at the end is not a fault)
    statuses = [status for status, _ in seen]
    running = statuses.index("processed")
    assert set(statuses[:running]) == {"processing"} and set(statuses[running:]) == {"processed"}, statuses
    assert len({until for _, until in seen[:running]}) > 1, seen  # the lease was renewed during the drip
    [(status, attempts)] = rows(app, "SELECT status, attempts FROM events")
    assert status == "processed" and attempts <= MAX_ATTEMPTS
    assert attempt_rows(app) == [(n, "processed") for n in range(1, attempts + 1)] == [(1, "processed")]
    assert api.calls == 1


def test_an_attempt_that_outlives_its_lease_marks_nothing_and_says_so(
    pg_url: str, redis_url: str, short_leases: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No renewal (a worker whose heartbeat stopped): once its lease is over the sweeper takes the
    row and records the abandoned attempt; the late attempt then finds its token stale, changes
    nothing on the row and logs one line; the next attempt processes the event."""
    monkeypatch.setattr(claims, "renew", lambda rt, claim: False)
    api = SlowStripe(slow=1)
    with serve(api.route, api.drip) as base:
        app = lease_app(pg_url, base, REDIS_URL=redis_url)
        event_id = deliver(app)
        rt = runtime(app)
        thread, result = start_job(app, event_id)
        wait_until(lambda: api.calls == 1)
        wait_until(lambda: sweep(rt) == 1, timeout=60, interval=0.1)  # its lease is over: requeued
        with caplog.at_level(logging.WARNING, logger="webhooks.jobs.process"):
            wait_until(lambda: not thread.is_alive(), timeout=60)
        assert result == {"status": "skipped"}
        assert rows(app, "SELECT status, attempts FROM events") == [("queued", 1)]  # the late attempt changed nothing
        drain(app)
    stale = [r.getMessage() for r in caplog.records if "outlived its claim" in r.getMessage()]
    assert stale == [
        f"attempt 1 of stripe/{event_id} outlived its claim (lease over or superseded):"
        " the event was left to the newer claim"
    ]
    assert rows(app, "SELECT status, attempts FROM events") == [("processed", 2)]
    assert attempt_rows(app) == [(1, "error"), (2, "processed")]  # one row per attempt
    [(error,)] = rows(app, "SELECT error FROM attempts WHERE number = 1")
    assert error.startswith("AbandonedJobError")  # the sweeper's record: the late attempt adds none


def test_a_dead_holders_events_are_free_within_ninety_seconds_by_default() -> None:
    """The restarts issue: a claim was leased for the job timeout plus 30 s (330 s by default) and
    swept every 60 s, so a SIGKILLed worker held its events five and a half minutes. A lease is at
    most 60 s (renewed every third of it while its holder lives), whatever the job timeout, and the
    sweep runs every 15 s by default: lease + interval stay under 90 s."""
    from webhooks.configuration import settings as webhooks_config

    settings = webhooks_config.load({})
    for timeout in (10, 300, 3600):
        assert claims.lease(timeout) <= 60
    assert claims.lease(10) == 10 + claims.LEASE_GRACE  # a short job's lease is what it was
    assert settings.sweep_interval <= 20
    assert claims.lease(settings.job_timeout) + settings.sweep_interval < 90
