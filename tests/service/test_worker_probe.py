"""The worker's own listener (#40): with ``WEBHOOKS_WORKER_PORT`` set, ``webhooks worker`` answers
``/healthz`` (its loop is turning) and ``/metrics`` (its own counters, behind the admin's Basic auth),
so a worker pod has a liveness probe and is scraped on its own: the web pods' ``/metrics`` cannot
see a worker on another host."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import ADMIN_PASSWORD, STRIPE_SECRET, base_config, free_port, make_app, stripe_event, wait_until
from tests.service.test_metrics import post, scrape, service, value  # noqa: F401  # service: a fixture
from tests.support.processes import BIN, running
from webhooks.service import worker_probe
from webhooks.worker import loop


@pytest.fixture
def probe(sqlite_url: str) -> Iterator[str]:
    app = make_app(base_config(sqlite_url, WEBHOOKS_ADMIN_PASSWORD=ADMIN_PASSWORD))
    port = free_port()
    server = worker_probe.serve(app.extensions["webhooks"], port, "127.0.0.1")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.shutdown()
        server.server_close()


def test_healthz_is_ok_while_the_loop_beats_and_stalled_after(probe: str, monkeypatch: pytest.MonkeyPatch) -> None:
    loop.beat()
    ok = requests.get(f"{probe}/healthz", timeout=10)
    assert ok.status_code == 200 and ok.json()["status"] == "ok" and ok.json()["process"] == "worker"
    # No beat for longer than a job may run (WEBHOOKS_JOB_TIMEOUT, 300 s) plus the grace: stalled.
    monkeypatch.setattr(loop, "BEAT", [loop.BEAT[0] - 300 - worker_probe.GRACE - 1])
    stalled = requests.get(f"{probe}/healthz", timeout=10)
    assert stalled.status_code == 503 and stalled.json()["status"] == "stalled"
    assert requests.get(f"{probe}/nothing", timeout=10).status_code == 404


def test_metrics_need_the_admin_password(probe: str) -> None:
    assert requests.get(f"{probe}/metrics", timeout=10).status_code == 401
    assert requests.get(f"{probe}/metrics", auth=("admin", "wrong"), timeout=10).status_code == 401
    assert requests.get(f"{probe}/metrics", headers={"Authorization": "Basic %%%"}, timeout=10).status_code == 401
    right = requests.get(f"{probe}/metrics", auth=("admin", ADMIN_PASSWORD), timeout=10)
    assert right.status_code == 200 and "webhooks_up" in right.text


def test_guessing_the_password_on_the_worker_port_is_throttled_as_on_the_web(probe: str) -> None:
    """The attack: guess the admin password on the worker's port, which has no gunicorn or proxy in
    front. After the throttle's free tries every answer is 429, the right password too, until it refills."""
    from webhooks.admin.throttle import FREE

    answers = [requests.get(f"{probe}/metrics", auth=("admin", f"guess-{n}"), timeout=10) for n in range(FREE + 1)]
    assert [a.status_code for a in answers] == [401] * FREE + [429]
    assert answers[-1].json() == {"error": "login_throttled"} and int(answers[-1].headers["Retry-After"]) > 0
    right = requests.get(f"{probe}/metrics", auth=("admin", ADMIN_PASSWORD), timeout=10)
    assert right.status_code == 429 and "webhooks_up" not in right.text


def test_a_bad_worker_port_stops_start_up_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEBHOOKS_WORKER_PORT", "http")
    assert worker_probe.problem() == "configuration: WEBHOOKS_WORKER_PORT must be a port number (1-65535), not 'http'"
    monkeypatch.setenv("WEBHOOKS_WORKER_PORT", "0")
    assert "must be a port number" in str(worker_probe.problem())
    monkeypatch.delenv("WEBHOOKS_WORKER_PORT")
    assert worker_probe.problem() is None


@pytest.mark.slow
def test_a_worker_on_another_host_is_scraped_on_its_own(
    service: tuple[str, dict[str, str]],  # noqa: F811  # the fixture imported above
    tmp_path: Path,
) -> None:
    """Web and worker in separate metrics directories, as in two pods: the web's /metrics never
    sees the worker's attempts (the alert "worker stopped" would fire), the worker's own does."""
    base, env = service
    port = free_port()
    worker_env = env | {"WEBHOOKS_WORKER_PORT": str(port), "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "worker-pod")}
    bodies = [stripe_event("evt_w1"), stripe_event("evt_w2")]
    for body in bodies:
        assert post(base, "/webhooks/stripe", body, signed(body)) == 200
    with running([str(BIN / "webhooks"), "worker"], worker_env, cwd=tmp_path):
        worker = f"http://127.0.0.1:{port}"
        health = wait_until(lambda: _get(f"{worker}/healthz"), interval=0.2)
        assert health.json()["status"] == "ok"

        def processed() -> Any:
            samples = scrape(worker)
            return samples if value(samples, "webhooks_processing_attempts_total", **PROCESSED) == 2 else None

        done = wait_until(processed, interval=0.3)
        assert value(done, "webhooks_queue_depth") == 0  # the gauges, read from the database and Redis
        web = scrape(base)
        assert value(web, "webhooks_processing_attempts_total", **PROCESSED) == 0
        assert value(web, "webhooks_deliveries_total", endpoint="stripe", outcome="stored") == 2


PROCESSED = {"endpoint": "stripe", "outcome": "processed"}


def _get(url: str) -> Any:
    try:
        answer = requests.get(url, timeout=5)
    except requests.ConnectionError:
        return None
    return answer if answer.status_code == 200 else None


def signed(body: bytes) -> dict[str, str]:
    from tests.conftest import stripe_headers

    return stripe_headers(body, secret=STRIPE_SECRET)
