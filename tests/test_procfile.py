"""The Procfile as written runs under honcho (the usual local run) on PostgreSQL + Redis: the
release step migrates a fresh database while web and worker wait for it, then an event is
received and processed."""

from __future__ import annotations

import requests

from tests.conftest import ADMIN_PASSWORD, ROOT, STRIPE_SECRET, free_port, stripe_event, stripe_headers, wait_until
from tests.test_processes import BIN, clean_env, event_status, running, wait_http


def test_honcho_start_runs_release_web_and_worker(pg_url: str, redis_url: str, tmp_path: object) -> None:
    port = free_port()  # honcho gives each Procfile line the base port + 100 × its position: web is second
    env = clean_env(
        DATABASE_URL=pg_url, REDIS_URL=redis_url, STRIPE_WEBHOOK_SECRET=STRIPE_SECRET,
        WEBHOOKS_ADMIN_PASSWORD=ADMIN_PASSWORD,
        WEB_CONCURRENCY="1", PROMETHEUS_MULTIPROC_DIR=str(tmp_path), PATH=f"{BIN}:{clean_env()['PATH']}",
    )
    cmd = [str(BIN / "honcho"), "start", "-f", str(ROOT / "Procfile"), "-d", str(ROOT), "-p", str(port - 100)]
    with running(cmd, env) as honcho:
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/healthz")
        wait_until(lambda: requests.get(f"{base}/readyz", timeout=10).status_code == 200, timeout=60)
        body = stripe_event("evt_procfile")
        response = requests.post(f"{base}/webhooks/stripe", data=body, headers=stripe_headers(body), timeout=30)
        assert response.status_code == 200, response.text
        try:
            wait_until(lambda: event_status(base, "stripe", "evt_procfile") == "processed", timeout=60)
            assert honcho.poll() is None, "honcho stopped: one of the Procfile's processes exited"
        except AssertionError:
            honcho.terminate()
            raise AssertionError(honcho.communicate(timeout=30)[0][-6000:]) from None
