"""The real processes: ``webhooks serve`` (embedded), gunicorn + ``webhooks worker`` on PostgreSQL + Redis."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import requests
import sqlalchemy as sa
from rq import Queue

from tests import sample_handlers
from tests.conftest import (
    ADMIN_PASSWORD,
    ADYEN_KEY,
    STRIPE_SECRET,
    adyen_body,
    adyen_item,
    free_port,
    stripe_event,
    stripe_headers,
    wait_until,
)
from tests.support.processes import BIN, clean_env, event_status, gunicorn_cmd, running, wait_http
from tests.support.templates import migrated

pytestmark = pytest.mark.slow


def test_webhooks_serve_embedded_default(tmp_path: Path) -> None:
    port = free_port()
    env = clean_env(STRIPE_WEBHOOK_SECRET=STRIPE_SECRET)
    with running([str(BIN / "webhooks"), "serve", "--port", str(port)], env, cwd=tmp_path) as proc:
        assert proc.stdout is not None
        lines: list[str] = []

        def banner() -> str | None:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            lines.append(line)
            found = re.search(r"password (\S+)", line)
            return found.group(1) if found else None

        password = wait_until(banner, timeout=90, interval=0)
        threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep the pipe drained
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/admin/api/events")
        body = stripe_event("evt_serve")
        assert requests.post(f"{base}/webhooks/stripe", data=body, headers=stripe_headers(body), timeout=30).ok
        assert wait_until(lambda: event_status(base, "stripe", "evt_serve", password) == "processed")
    assert (tmp_path / "webhooks.db").exists()  # the SQLite default, in the working directory


@pytest.fixture
def production(pg_url: str, redis_url: str) -> Iterator[tuple[str, dict[str, str]]]:
    """gunicorn on PostgreSQL + Redis, with the test handlers; yields (base URL, env)."""
    migrated(pg_url)
    engine = sa.create_engine(pg_url)
    sample_handlers.create_tables(engine)
    engine.dispose()
    port = free_port()
    env = clean_env(
        DATABASE_URL=pg_url,
        REDIS_URL=redis_url,
        WEBHOOKS_ADMIN_PASSWORD=ADMIN_PASSWORD,
        WEBHOOKS_HANDLERS="tests.sample_handlers",
        STRIPE_WEBHOOK_SECRET=STRIPE_SECRET,
        ADYEN_HMAC_KEY=ADYEN_KEY,
        PORT=str(port),
        WEB_CONCURRENCY="2",
        WEB_THREADS="8",
    )
    cmd = gunicorn_cmd(port, "--no-control-socket")
    with running(cmd, env) as proc:
        threading.Thread(target=proc.stdout.read, daemon=True).start()  # type: ignore[union-attr]
        wait_http(f"http://127.0.0.1:{port}/")
        yield f"http://127.0.0.1:{port}", env


def count(env: dict[str, str], sql: str) -> int:
    engine = sa.create_engine(env["DATABASE_URL"])
    with engine.connect() as conn:
        value = conn.execute(sa.text(sql)).scalar_one()
    engine.dispose()
    return int(value)


def test_twenty_concurrent_deliveries_one_row_one_job_one_call(production: tuple[str, dict[str, str]]) -> None:
    base, env = production
    body = stripe_event("evt_race")
    headers = stripe_headers(body)
    barrier = threading.Barrier(20)
    statuses: list[int] = []

    def send() -> None:
        barrier.wait()
        statuses.append(requests.post(f"{base}/webhooks/stripe", data=body, headers=headers, timeout=60).status_code)

    threads = [threading.Thread(target=send) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert statuses == [200] * 20
    assert count(env, "SELECT count(*) FROM events") == 1
    assert Queue("default", connection=redis.Redis.from_url(env["REDIS_URL"])).count == 1  # one job
    subprocess.run([str(BIN / "webhooks"), "worker", "--burst"], env=env, check=True, capture_output=True, timeout=180)
    assert count(env, "SELECT count(*) FROM test_handler_calls") == 1
    assert count(env, "SELECT count(*) FROM events WHERE status = 'processed'") == 1


def test_gunicorn_and_worker_process_both_providers(production: tuple[str, dict[str, str]]) -> None:
    base, env = production
    with running([str(BIN / "webhooks"), "worker"], env) as worker:
        threading.Thread(target=worker.stdout.read, daemon=True).start()  # type: ignore[union-attr]
        stripe_body = stripe_event("evt_prod")
        assert requests.post(f"{base}/webhooks/stripe", data=stripe_body, headers=stripe_headers(stripe_body)).ok
        reply = requests.post(f"{base}/webhooks/adyen", data=adyen_body(adyen_item("PSPPROD")))
        assert reply.text == "[accepted]"
        wait_until(lambda: event_status(base, "stripe", "evt_prod") == "processed")
        wait_until(lambda: event_status(base, "adyen", "PSPPROD:AUTHORISATION:true") == "processed")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0  # warm shutdown


def test_rq_own_worker_cli_processes_events_plain_and_with_the_worker_class(
    production: tuple[str, dict[str, str]],
) -> None:
    """The Procfile's worker may be RQ's own CLI: plain (the jobs build their runtime from the
    environment: DESIGN §6), or with our worker class (it owns the runtime the jobs use)."""
    base, env = production
    rq_worker = [str(BIN / "rq"), "worker", "--burst", "--url", env["REDIS_URL"]]
    body = stripe_event("evt_plain_rq")
    assert requests.post(f"{base}/webhooks/stripe", data=body, headers=stripe_headers(body)).ok
    subprocess.run(rq_worker, env=env, check=True, capture_output=True, timeout=180)
    assert event_status(base, "stripe", "evt_plain_rq") == "processed"
    body = stripe_event("evt_rq_class")
    assert requests.post(f"{base}/webhooks/stripe", data=body, headers=stripe_headers(body)).ok
    subprocess.run(
        [*rq_worker, "-w", "webhooks.jobs.worker.Worker"], env=env, check=True, capture_output=True, timeout=180
    )
    assert event_status(base, "stripe", "evt_rq_class") == "processed"


def read_response(sock: Any) -> str:
    """One whole HTTP response (head and ``Content-Length`` body), however many segments it came in."""
    data = b""
    while True:
        head, blank, body = data.partition(b"\r\n\r\n")
        length = re.search(rb"(?im)^content-length: *(\d+)", head)
        if blank and len(body) >= (int(length.group(1)) if length else 0):
            return data.decode()
        chunk = sock.recv(4096)
        if not chunk:
            return data.decode()
        data += chunk


def test_a_stalled_client_gets_408_and_frees_its_thread(pg_url: str, redis_url: str) -> None:
    """A client that stops sending its body is answered 408 after WEBHOOKS_READ_TIMEOUT_SECONDS,
    and nothing is stored; gunicorn keeps serving others meanwhile."""
    import socket
    import time

    migrated(pg_url)
    port = free_port()
    env = clean_env(
        DATABASE_URL=pg_url,
        REDIS_URL=redis_url,
        STRIPE_WEBHOOK_SECRET=STRIPE_SECRET,
        WEBHOOKS_READ_TIMEOUT_SECONDS="1",
        WEB_CONCURRENCY="1",
        WEB_THREADS="2",
    )
    cmd = gunicorn_cmd(port, "--no-control-socket")
    with running(cmd, env) as proc:
        threading.Thread(target=proc.stdout.read, daemon=True).start()  # type: ignore[union-attr]
        wait_http(f"http://127.0.0.1:{port}/")
        body = stripe_event("evt_stalled")
        head = "".join(f"{k}: {v}\r\n" for k, v in stripe_headers(body).items())
        with socket.create_connection(("127.0.0.1", port), timeout=60) as slow:
            slow.sendall(
                f"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{head}\r\n".encode()
                + body[:20]
            )  # ...and then nothing
            started = time.monotonic()
            other = stripe_event("evt_meanwhile")
            assert (
                requests.post(
                    f"http://127.0.0.1:{port}/webhooks/stripe", data=other, headers=stripe_headers(other), timeout=60
                ).status_code
                == 200
            )
            answer = read_response(slow)
            waited = time.monotonic() - started
        assert answer.startswith("HTTP/1.1 408") and "request_timeout" in answer, answer
        # Not before the read timeout; the upper bound only tells a 408 from a hang (the socket's
        # own timeout), and leaves room for a loaded machine.
        assert 0.5 < waited < 60
    assert count(env, "SELECT count(*) FROM events") == 1  # only the other one
