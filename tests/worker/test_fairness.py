"""One endpoint's slow provider API never delays another endpoint's events (issue 30, finding 1).

The attack: junk Mollie classic nudges (``id=tr_<random>``, signed by nothing: the worker fetches
each payment) and Stripe events whose re-fetch API hangs, queued ahead of a genuine event of
another endpoint, with ONE worker (``webhooks serve``'s embedded thread; a Procfile ``webhooks
worker``). Both fake APIs hang until the test opens their gate: the genuine event must be
processed while every flood event is still unfinished, at most the lane's cap of calls hangs per
API, and the rest of the flood waits (in the lane's backlog, or deferred) instead of holding the
worker. Once the APIs answer, the flood's work resumes.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from rq.registry import ScheduledJobRegistry

from tests.conftest import (
    STRIPE_SECRET,
    base_config,
    make_app,
    rows,
    runtime,
    stripe_event,
    stripe_headers,
    wait_until,
)
from tests.fake_apis import gated, not_found, serve
from tests.support.processes import BIN, clean_env
from webhooks import lanes

MOLLIE_KEY = "test_dHar4XY7LxsDOtmnkVtjNVWXLSlXsM"  # the shape of Mollie's test keys
NUDGES = 24  # junk Mollie nudges
SLOW = 6  # Stripe events whose re-fetch hangs
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


class Apis:
    """The two hanging provider APIs and what each was asked."""

    def __init__(self, mollie: str, stripe: str, gate: threading.Event) -> None:
        self.mollie, self.stripe, self.gate = mollie, stripe, gate
        self.mollie_calls: list[str] = []
        self.stripe_calls: list[str] = []


@pytest.fixture
def apis() -> Iterator[Apis]:
    gate = threading.Event()
    mollie_calls: list[str] = []
    stripe_calls: list[str] = []
    with serve(gated(not_found, gate, mollie_calls)) as mollie, serve(gated(not_found, gate, stripe_calls)) as stripe:
        found = Apis(mollie, stripe, gate)
        found.mollie_calls, found.stripe_calls = mollie_calls, stripe_calls
        try:
            yield found
        finally:
            gate.set()  # never leave a worker or a lane waiting


def endpoints(apis: Apis) -> dict[str, Any]:
    return {
        "stripe": {"provider": "stripe", "secrets": [STRIPE_SECRET]},  # the genuine traffic
        # The limits a kind that signs nothing gets by default would refuse most of the flood at
        # the door (429): raised here, so the whole flood reaches the worker (the worst case).
        "mollie": {
            "provider": "mollie",
            "api_key": MOLLIE_KEY,
            "api_base": apis.mollie,
            "rate_limit": 100_000,
            "sender_rate_limit": 100_000,
        },
        "stripe_slow": {
            "provider": "stripe",
            "secrets": [STRIPE_SECRET],
            "api_key": "sk_test_123",
            "api_base": apis.stripe,
            "refetch": True,
        },
    }


def flood(app: Flask) -> None:
    client = app.test_client()
    for n in range(NUDGES):
        assert client.post("/webhooks/mollie", data=f"id=tr_{secrets.token_hex(6)}", headers=FORM).status_code == 200
        if n < SLOW:
            body = stripe_event(f"evt_slow_{n}", obj={"id": f"pi_slow_{n}", "object": "payment_intent"})
            assert client.post("/webhooks/stripe_slow", data=body, headers=stripe_headers(body)).status_code == 200


def genuine(app: Flask) -> None:
    body = stripe_event("evt_genuine", obj={"id": "pi_genuine", "object": "payment_intent", "status": "succeeded"})
    assert app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200


def status(app: Flask, endpoint: str, event_id: str) -> str | None:
    found = rows(app, "SELECT status FROM events WHERE endpoint = :e AND event_id = :i", e=endpoint, i=event_id)
    return found[0][0] if found else None


def flood_statuses(app: Flask) -> list[str]:
    return [s for (s,) in rows(app, "SELECT status FROM events WHERE endpoint IN ('mollie', 'stripe_slow')")]


def attack(app: Flask, apis: Apis) -> None:
    """The flood first (its first calls hang), then a genuine event: processed, flood unfinished."""
    flood(app)
    wait_until(lambda: apis.mollie_calls and apis.stripe_calls)  # both APIs hold calls now
    genuine(app)
    wait_until(lambda: status(app, "stripe", "evt_genuine") == "processed")
    unfinished = flood_statuses(app)
    assert len(unfinished) == NUDGES + SLOW
    assert set(unfinished) <= {"queued", "processing"}, unfinished  # the flood's work still waits
    # A hung call holds its own lane: at most the lane's cap of calls per API, whatever the flood.
    assert 1 <= len(apis.mollie_calls) <= lanes.CAP and 1 <= len(apis.stripe_calls) <= lanes.CAP
    assert unfinished.count("queued") >= NUDGES + SLOW - 2 * lanes.CAP
    apis.gate.set()  # the APIs answer (404: no such payment): the flood's work resumes
    # Mollie's nudges end ``ignored`` (unknown_object); the Stripe re-fetches ``failed`` (a signed
    # event whose object the provider does not have).
    wait_until(lambda: sum(s in ("failed", "ignored") for s in flood_statuses(app)) >= 2)


def test_a_flood_on_one_endpoint_leaves_another_endpoints_event_processed_embedded(sqlite_url: str, apis: Apis) -> None:
    config = base_config(
        sqlite_url,
        WEBHOOKS_EMBEDDED_WORKER="true",
        WEBHOOKS_OUTBOUND_TIMEOUT_SECONDS="120",  # the hang lasts until the gate opens
        ENDPOINTS=endpoints(apis),
    )
    attack(make_app(config), apis)


def toml(table: dict[str, Any]) -> str:
    lines = []
    for name, options in table.items():
        lines.append(f"[endpoints.{name}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in options.items()]
    return "\n".join(lines) + "\n"


@pytest.mark.slow
def test_a_flood_on_one_endpoint_leaves_another_endpoints_event_processed_postgres_redis(
    pg_url: str, redis_url: str, apis: Apis, tmp_path: Path
) -> None:
    app = make_app(base_config(pg_url, REDIS_URL=redis_url, ENDPOINTS=endpoints(apis)))
    config = tmp_path / "webhooks.toml"
    config.write_text(toml(endpoints(apis)))
    env = clean_env(
        DATABASE_URL=pg_url,
        REDIS_URL=redis_url,
        WEBHOOKS_CONFIG=str(config),
        WEBHOOKS_OUTBOUND_TIMEOUT_SECONDS="120",
        WEBHOOKS_LOG_LEVEL="WARNING",
    )
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen([str(BIN / "webhooks"), "worker"], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        attack(app, apis)
    finally:
        apis.gate.set()
        worker.terminate()
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        log.close()


def test_a_full_lane_defers_its_jobs_instead_of_waiting_and_counts_no_attempt_for_it(
    sqlite_url: str, apis: Apis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lanes, "BACKLOG", 1)  # 2 running + 1 waiting: the rest is deferred
    monkeypatch.setattr(lanes, "DEFER_MAX", 2.0)
    config = base_config(
        sqlite_url, WEBHOOKS_EMBEDDED_WORKER="true", WEBHOOKS_OUTBOUND_TIMEOUT_SECONDS="120", ENDPOINTS=endpoints(apis)
    )
    app = make_app(config)
    client = app.test_client()
    for _ in range(6):
        assert client.post("/webhooks/mollie", data=f"id=tr_{secrets.token_hex(6)}", headers=FORM).status_code == 200
    deferred = ScheduledJobRegistry(queue=runtime(app).queue.lane_queue)
    wait_until(lambda: deferred.count >= 1)  # rescheduled by RQ's scheduler, not waited on
    assert set(flood_statuses(app)) <= {"queued", "processing"}
    assert len(apis.mollie_calls) <= lanes.CAP
    apis.gate.set()  # Mollie answers (no such payment): every nudge ends, deferred ones too
    wait_until(lambda: flood_statuses(app).count("ignored") == 6)  # unknown_object, never failed
    attempts = [n for (n,) in rows(app, "SELECT attempts FROM events WHERE endpoint = 'mollie'")]
    assert attempts == [1] * 6  # a deferral is no attempt
