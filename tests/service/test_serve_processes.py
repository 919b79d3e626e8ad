"""``webhooks serve`` is web processes and one worker process on one SQLite file: a delivery to any
web process is processed by the worker process; a killed worker process is started again and
takes what waited; stopping the command stops every one of its processes."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
from pathlib import Path

import pytest
import requests

from tests.conftest import STRIPE_SECRET, free_port, stripe_event, stripe_headers, wait_until
from tests.support.processes import BIN, clean_env, wait_http


def children(pid: int) -> list[int]:
    """Children of every thread of ``pid`` (the master starts the worker process again from one)."""
    return [int(p) for task in Path(f"/proc/{pid}/task").iterdir() for p in (task / "children").read_text().split()]


def command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except FileNotFoundError:
        return ""


def worker_process(master: int) -> int | None:
    found = [p for p in children(master) if "serve-worker" in command(p)]
    return found[0] if len(found) == 1 else None


def processed(db: Path) -> set[str]:
    with sqlite3.connect(db, timeout=30) as conn:
        return {e for (e,) in conn.execute("SELECT event_id FROM events WHERE status = 'processed'")}


def post(base: str, event_id: str) -> None:
    body = stripe_event(event_id)
    assert requests.post(f"{base}/webhooks/stripe", data=body, headers=stripe_headers(body), timeout=30).ok


@pytest.mark.slow
def test_serve_processes_in_its_own_process_restarts_it_and_stops_it(tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = clean_env(STRIPE_WEBHOOK_SECRET=STRIPE_SECRET, WEB_CONCURRENCY="2", WEB_THREADS="4")
    proc = subprocess.Popen(
        [str(BIN / "webhooks"), "serve", "--port", str(port)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    db = tmp_path / "webhooks.db"
    try:
        wait_http(f"{base}/healthz")
        web = [p for p in children(proc.pid) if "serve-worker" not in command(p)]
        assert len(web) == 2  # WEB_CONCURRENCY web processes beside the worker process
        first = wait_until(lambda: worker_process(proc.pid))
        ids = [f"evt_serve_{i}" for i in range(6)]
        for event_id in ids:
            post(base, event_id)
        wait_until(lambda: processed(db) >= set(ids))

        os.kill(first, signal.SIGKILL)
        post(base, "evt_while_down")  # stored by a web process; waits as a `queued` row
        second = wait_until(lambda: (p := worker_process(proc.pid)) not in (None, first) and p)
        wait_until(lambda: "evt_while_down" in processed(db))
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0
    assert not Path(f"/proc/{second}").exists() or command(second) == ""  # no worker process outlives it
