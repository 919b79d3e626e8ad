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


def status_count(db: Path, status: str) -> int:
    with sqlite3.connect(db, timeout=30) as conn:
        return int(conn.execute("SELECT count(*) FROM events WHERE status = ?", (status,)).fetchone()[0])


def _serve(tmp_path: Path, port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(BIN / "webhooks"), "serve", "--port", str(port)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: SIGKILL reaches every one of its processes
    )


@pytest.mark.slow
def test_serve_killed_outright_takes_back_its_claims_at_the_next_start(tmp_path: Path) -> None:
    """The restarts issue: 50 deliveries acknowledged, every process of ``serve`` SIGKILLed after
    the last 200 (some events mid-processing, their claims leased for minutes), then ``serve``
    started again: all 50 are processed within 30 s of the restart, each effect once. And a second
    ``serve`` on the same database refuses to start in one line."""
    import time

    from tests.serve_handlers import CREATE

    db = tmp_path / "webhooks.db"
    with sqlite3.connect(db) as conn:
        conn.execute(CREATE)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = clean_env(STRIPE_WEBHOOK_SECRET=STRIPE_SECRET, WEBHOOKS_HANDLERS="tests.serve_handlers", WEB_CONCURRENCY="2")
    ids = [f"evt_kill_{i}" for i in range(50)]
    first = _serve(tmp_path, port, env)
    try:
        wait_http(f"{base}/healthz")
        for event_id in ids:
            body = stripe_event(event_id, "test.slow")
            assert requests.post(f"{base}/webhooks/stripe", data=body, headers=stripe_headers(body), timeout=30).ok
        wait_until(lambda: len(processed(db)) >= 3, timeout=60)
        wait_until(lambda: status_count(db, "processing"), timeout=60, interval=0.01)  # a handler mid-run
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    assert status_count(db, "processing") == 1  # its claim leased for minutes
    assert processed(db) < set(ids)
    second = _serve(tmp_path, port, env)
    try:
        restarted = time.monotonic()
        wait_http(f"{base}/healthz")
        wait_until(lambda: processed(db) >= set(ids), timeout=120)
        took = time.monotonic() - restarted
        other = subprocess.run(
            [str(BIN / "webhooks"), "serve", "--port", str(free_port())],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=60)
    assert took < 30, took
    with sqlite3.connect(db, timeout=30) as conn:
        counts = dict(conn.execute("SELECT event_id, n FROM serve_effects"))
    assert counts == dict.fromkeys(ids, 1)
    assert other.returncode == 1
    assert "another webhooks serve is running on webhooks.db" in other.stderr, other.stderr
