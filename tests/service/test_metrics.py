"""``/metrics`` under two gunicorn processes and a worker (Prometheus multiprocess mode): every
delivery outcome, rejection reason and processing outcome counted once across processes; the
service gauges read from the database and Redis; the oldest-pending age grows while no worker runs
and falls to 0 after."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from flask import Flask
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import (
    ADMIN_PASSWORD,
    STRIPE_SECRET,
    admin_headers,
    base_config,
    drain,
    free_port,
    make_app,
    stripe_event,
    stripe_headers,
    wait_until,
)
from tests.support.processes import BIN, clean_env, gunicorn_cmd, running, wait_http
from tests.support.templates import migrated

pytestmark = pytest.mark.slow
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(base: str) -> Samples:
    response = requests.get(f"{base}/metrics", auth=("admin", ADMIN_PASSWORD), timeout=30)
    assert response.status_code == 200, response.text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def service(pg_url: str, redis_url: str, tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    migrated(pg_url)
    port = free_port()
    env = clean_env(
        DATABASE_URL=pg_url,
        REDIS_URL=redis_url,
        WEBHOOKS_ADMIN_PASSWORD=ADMIN_PASSWORD,
        WEBHOOKS_HANDLERS="tests.metrics_handlers",
        STRIPE_WEBHOOK_SECRET=STRIPE_SECRET,
        WEBHOOKS_MAX_ATTEMPTS="2",
        WEBHOOKS_RETRY_BASE_SECONDS="0",
        WEB_CONCURRENCY="2",
        WEB_THREADS="4",
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "metrics"),
        WEBHOOKS_LOG_LEVEL="WARNING",
    )
    cmd = gunicorn_cmd(port, "--no-control-socket")
    with running(cmd, env, cwd=tmp_path):
        wait_http(f"http://127.0.0.1:{port}/healthz")
        yield f"http://127.0.0.1:{port}", env


def post(base: str, path: str, body: bytes, headers: dict[str, str]) -> int:
    return requests.post(f"{base}{path}", data=body, headers=headers, timeout=30).status_code


def test_metrics_count_every_outcome_across_processes(service: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    base, env = service
    ok1, ok2, bad = stripe_event("evt_m1"), stripe_event("evt_m2"), stripe_event("evt_m3", "test.fail")
    for body in (ok1, ok2, bad, ok1, ok1):  # 3 stored, 2 duplicates (they may reach either process)
        assert post(base, "/webhooks/stripe", body, stripe_headers(body)) == 200
    forged = stripe_headers(ok2, secret="whsec_not_ours")
    assert post(base, "/webhooks/stripe", ok2, forged) == 400
    assert post(base, "/webhooks/stripe", ok2, {"Content-Type": "application/json"}) == 400
    assert post(base, "/webhooks/nope-1", ok2, {}) == 404
    assert post(base, "/webhooks/nope-2", ok2, {}) == 404

    first = scrape(base)
    assert value(first, "webhooks_deliveries_total", endpoint="stripe", outcome="stored") == 3
    assert value(first, "webhooks_deliveries_total", endpoint="stripe", outcome="duplicate") == 2
    assert value(first, "webhooks_deliveries_total", endpoint="stripe", outcome="rejected") == 2
    assert value(first, "webhooks_deliveries_total", endpoint="unknown/*", outcome="rejected") == 2
    assert value(first, "webhooks_rejections_total", endpoint="stripe", reason="signature_mismatch") == 1
    assert value(first, "webhooks_rejections_total", endpoint="stripe", reason="missing_signature") == 1
    assert value(first, "webhooks_rejections_total", endpoint="unknown/*", reason="unknown_endpoint") == 2
    assert value(first, "webhooks_queue_depth") == 3
    assert value(first, "webhooks_up", service="database") == value(first, "webhooks_up", service="redis") == 1

    # No worker yet: the oldest pending event ages.
    age = value(first, "webhooks_oldest_pending_age_seconds")
    wait_until(lambda: value(scrape(base), "webhooks_oldest_pending_age_seconds") >= age + 1, interval=0.5)

    with running([str(BIN / "webhooks"), "worker"], env, cwd=tmp_path):
        # The gauges come from the database, the counters from the worker's own files, written a
        # moment after the rows it commits: wait for every value asserted, not for the rows alone.
        expected = {
            ("webhooks_processing_attempts_total", "processed"): 2,
            ("webhooks_processing_attempts_total", "error"): 1,
            ("webhooks_processing_attempts_total", "failed"): 1,
        }

        def drained() -> Samples | None:
            samples = scrape(base)
            done = (
                value(samples, "webhooks_events_failed") == 1
                and value(samples, "webhooks_oldest_pending_age_seconds") == 0
                and value(samples, "webhooks_queue_depth") == 0
                and value(samples, "webhooks_processing_seconds_count", endpoint="stripe") == 4
                and all(
                    value(samples, name, endpoint="stripe", outcome=outcome) == n
                    for (name, outcome), n in expected.items()
                )
            )
            return samples if done else None

        after = wait_until(drained, interval=0.5)
    for (name, outcome), n in expected.items():
        assert value(after, name, endpoint="stripe", outcome=outcome) == n
    assert value(after, "webhooks_processing_seconds_count", endpoint="stripe") == 4
    assert value(after, "webhooks_queue_depth") == 0
    assert value(after, "webhooks_deliveries_total", endpoint="stripe", outcome="stored") == 3  # kept across scrapes


def test_metrics_need_the_admin_password_and_count_503(sqlite_url: str) -> None:
    from webhooks import metrics

    app: Flask = make_app(base_config(sqlite_url))
    assert app.test_client().get("/metrics").status_code == 401
    assert app.test_client().get("/metrics", headers=admin_headers()).status_code == 200
    down = make_app(base_config(sqlite_url))
    down.extensions["webhooks"].engine.dispose()
    before = metrics.DELIVERIES.labels("stripe", "unavailable")._value.get()
    down.extensions["webhooks"].engine.url = down.extensions["webhooks"].engine.url.set(
        database="/nonexistent/dir/x.db"
    )
    body = stripe_event("evt_down")
    down_engine = __import__("webhooks.engines", fromlist=["make_engine"]).make_engine(
        "sqlite:////nonexistent/dir/x.db"
    )
    down.extensions["webhooks"].engine = down_engine
    down.extensions["webhooks"].store = __import__("webhooks.store", fromlist=["open_store"]).open_store(down_engine)
    assert down.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 503
    assert metrics.DELIVERIES.labels("stripe", "unavailable")._value.get() == before + 1


def test_forwarding_gauges_per_configured_destination(sqlite_url: str) -> None:
    from tests.forward.test_forwarding import forward
    from tests.support import destination

    with destination.running() as service:
        service.answer = lambda n, seen: (500, {}, b"down")
        dests = {
            "orders": destination.config(service, circuit_failures=1, retry_schedule=[0], probe_seconds=3600),
            "audit": destination.config(service),
        }
        config = base_config(sqlite_url, DESTINATIONS=dests)
        config["ENDPOINTS"]["stripe"]["forward"] = ["orders"]
        app = make_app(config)
        client = app.test_client()
        for event_id in ("evt_f1", "evt_f2"):
            body = stripe_event(event_id)
            assert client.post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200
        drain(app)

        def gauges() -> Samples:
            text = client.get("/metrics", headers=admin_headers()).get_data(as_text=True)
            return {
                (s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text)
                for s in family.samples
                if s.name.startswith("webhooks_forward_")
                and "outcome" not in s.labels
                and "le" not in s.labels
                and not s.name.startswith("webhooks_forward_request")
            }

        before = gauges()
        assert {dict(labels)["destination"] for _, labels in before} == {"orders", "audit"}  # configured names only
        assert value(before, "webhooks_forward_pending", destination="orders") == 2
        assert value(before, "webhooks_forward_pending", destination="audit") == 0
        assert value(before, "webhooks_forward_oldest_pending_age_seconds", destination="orders") >= 0
        assert value(before, "webhooks_forward_circuit_open", destination="orders") == 0
        forward(app)  # both answered 500: the circuit opens (one failure is enough here)
        assert client.post("/admin/api/destinations/audit/pause", json={}, headers=admin_headers()).status_code == 200
        after = gauges()
        assert value(after, "webhooks_forward_circuit_open", destination="orders") == 1
        assert value(after, "webhooks_forward_pending", destination="orders") == 2  # one attempt left each
        assert value(after, "webhooks_forward_paused", destination="audit") == 1
        assert value(after, "webhooks_forward_paused", destination="orders") == 0
        assert value(after, "webhooks_forward_circuit_open", destination="audit") == 0
