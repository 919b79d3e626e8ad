"""The Procfile as written runs under honcho (the usual local run) on PostgreSQL + Redis: the
release step migrates a fresh database while web and worker wait for it, then an event is
received and processed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.conftest import ADMIN_PASSWORD, ROOT, STRIPE_SECRET, free_port, stripe_event, stripe_headers, wait_until
from tests.support.processes import BIN, clean_env, event_status, wait_http


@contextlib.contextmanager
def process_group(cmd: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """honcho and every process it starts, in a session of their own: stopped together, whatever
    state they are in (a leftover worker would take jobs from later tests)."""
    proc = subprocess.Popen(
        cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        yield proc
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=30)
                break
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # children that outlived honcho itself


@pytest.mark.slow
def test_honcho_start_runs_release_web_and_worker(pg_url: str, redis_url: str, tmp_path: object) -> None:
    # honcho gives each Procfile line the base port + 100 × its position: web is first, so
    # `honcho start -p 8000` (the README's local run) serves on 8000, not 8100.
    port = free_port()
    env = clean_env(
        DATABASE_URL=pg_url,
        REDIS_URL=redis_url,
        STRIPE_WEBHOOK_SECRET=STRIPE_SECRET,
        WEBHOOKS_ADMIN_PASSWORD=ADMIN_PASSWORD,
        WEB_CONCURRENCY="1",
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path),
        PATH=f"{BIN}:{clean_env()['PATH']}",
    )
    cmd = [str(BIN / "honcho"), "start", "-f", str(ROOT / "Procfile"), "-d", str(ROOT), "-p", str(port)]
    with process_group(cmd, env) as honcho:
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
            os.killpg(honcho.pid, signal.SIGTERM)
            raise AssertionError(honcho.communicate(timeout=60)[0][-6000:]) from None


@pytest.mark.slow
def test_the_release_step_waits_for_a_database_still_starting(tmp_path: Path) -> None:
    """#40: compose and a Helm hook start the release step beside PostgreSQL; ``db upgrade --wait``
    waits for it to answer (bounded) instead of failing on its first refused connection."""
    from tests.faults.services import Postgres

    server = Postgres()  # initialised, not yet started
    env = clean_env(DATABASE_URL=server.url, WEBHOOKS_LOG_LEVEL="WARNING")
    log = tmp_path / "release.log"
    with log.open("w") as sink:
        release = subprocess.Popen(
            [str(BIN / "webhooks"), "db", "upgrade", "--wait", "120"], env=env, cwd=tmp_path,
            stdout=subprocess.PIPE, stderr=sink, text=True,
        )  # fmt: skip
    said = "waiting for the database: database not answering (OperationalError)"
    try:
        wait_until(lambda: release.poll() is not None or said in log.read_text(), timeout=60)
        assert release.poll() is None, log.read_text()  # still waiting, not failed
        server.start()
        out, _ = release.communicate(timeout=120)
        assert release.returncode == 0, log.read_text()
        assert out.strip().splitlines()[-1] == "database at head"
    finally:
        release.kill()
        server.stop()
    gone = subprocess.run(
        [str(BIN / "webhooks"), "db", "upgrade", "--wait", "1"], env=env, cwd=tmp_path, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert gone.returncode == 1
    assert gone.stderr.strip().splitlines()[-1] == (
        "Error: database not answering (OperationalError) after 1 s: check DATABASE_URL and that the database runs"
    )
