"""Killed and stopped processes: a SIGKILLed worker's job is found and run again (once in effect);
SIGTERM lets the worker finish its job and gunicorn finish its in-flight request."""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path

import pytest

from tests.conftest import STRIPE_SECRET, stripe_event, stripe_headers, wait_until
from tests.faults.conftest import gunicorn, processes, service_env, worker
from tests.faults.services import Redis
from tests.support.processes import one, post, status

pytestmark = pytest.mark.slow


def accepted(port: int, client_port: int) -> bool:
    """Whether the server has ``accept()``ed the connection from ``client_port``: until then the
    kernel holds it in the listen queue without a socket inode (Linux ``/proc/net/tcp``)."""
    local, remote = f"0100007F:{port:04X}", f"0100007F:{client_port:04X}"
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == local and fields[2] == remote:
            return fields[9] != "0"
    return False


def test_sigkilled_worker_mid_job_is_recovered_once(
    database: str, redis_server: Redis, tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    env = service_env(database, redis_server.url)
    with processes() as procs:
        web, base = gunicorn(env, tmp_path, workers=1, threads=2)
        procs.append(web)
        post(base, "evt_killed")
        victim = worker(env, tmp_path, "victim")
        procs.append(victim)
        wait_until(lambda: status(database, "evt_killed") == "processing")
        victim.signal(signal.SIGKILL)
        killed = time.monotonic()
        procs.append(worker(env, tmp_path, "successor"))
        wait_until(lambda: status(database, "evt_killed") == "processed", timeout=120, interval=0.1)
        recovery = time.monotonic() - killed
    record_property("recovery_after_sigkill_s", round(recovery, 1))
    print(f"recovery after SIGKILL: {recovery:.1f} s (sweep age 3 s, interval 1 s, handler 3 s)")
    assert one(database, "SELECT n FROM fault_effects") == (1,)
    assert one(database, "SELECT attempts FROM events") == (2,)


def test_sigterm_lets_the_worker_finish_its_job(database: str, redis_server: Redis, tmp_path: Path) -> None:
    env = service_env(database, redis_server.url)
    with processes() as procs:
        web, base = gunicorn(env, tmp_path, workers=1, threads=2)
        procs.append(web)
        post(base, "evt_term")
        busy = worker(env, tmp_path, "busy")
        wait_until(lambda: status(database, "evt_term") == "processing")
        busy.signal(signal.SIGTERM)
        assert busy.stop(timeout=60) == 0, busy.tail()
    assert status(database, "evt_term") == "processed"
    assert one(database, "SELECT n FROM fault_effects") == (1,)


def test_a_job_past_the_stop_timeout_is_interrupted_and_released(
    database: str, redis_server: Redis, tmp_path: Path
) -> None:
    """The restarts issue: SIGTERM while a 3 s handler runs, ``WEBHOOKS_STOP_TIMEOUT=1``: the worker
    exits within the window (not after the job, not after a lease), the event is ``queued`` again
    with an ``interrupted`` attempt that is not counted, and the next worker processes it at once,
    its effect once (the interrupted attempt's rolled back)."""
    env = service_env(database, redis_server.url, WEBHOOKS_STOP_TIMEOUT="1")
    with processes() as procs:
        web, base = gunicorn(env, tmp_path, workers=1, threads=2)
        procs.append(web)
        post(base, "evt_cut", "test.slow")
        busy = worker(env, tmp_path, "cut")
        wait_until(lambda: status(database, "evt_cut") == "processing", interval=0.02)
        asked = time.monotonic()
        assert busy.stop(timeout=60) == 0, busy.tail()
        took = time.monotonic() - asked
        assert status(database, "evt_cut") == "queued", busy.tail()
        assert one(database, "SELECT attempts FROM events") == (0,)  # not counted
        assert one(database, "SELECT status FROM attempts") == ("interrupted",)
        procs.append(worker(env, tmp_path, "next"))
        wait_until(lambda: status(database, "evt_cut") == "processed", timeout=30)
    assert took < 5, took
    assert one(database, "SELECT n FROM fault_effects") == (1,)
    assert one(database, "SELECT attempts FROM events") == (1,)


def test_sigterm_lets_gunicorn_finish_an_in_flight_request(database: str, redis_server: Redis, tmp_path: Path) -> None:
    env = service_env(database, redis_server.url)
    body = stripe_event("evt_inflight", "payment_intent.succeeded")
    head = "".join(f"{k}: {v}\r\n" for k, v in stripe_headers(body).items())
    with processes() as procs:
        web, base = gunicorn(env, tmp_path, workers=1, threads=2)
        procs.append(web)
        port = int(base.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
            conn.sendall(
                f"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
                f"Connection: close\r\n{head}\r\n".encode()
                + body[:20]
            )
            # gthread hands an accepted connection straight to a thread: the request is in flight.
            wait_until(lambda: accepted(port, conn.getsockname()[1]), interval=0.01)
            web.signal(signal.SIGTERM)
            # The master is stopping (it signals the worker next), and the body is not all sent yet.
            wait_until(lambda: "Handling signal: term" in web.tail(), interval=0.01)
            conn.sendall(body[20:])
            reply = b""
            while chunk := conn.recv(4096):
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
        assert web.popen.wait(timeout=60) == 0
    assert status(database, "evt_inflight") == "received" or status(database, "evt_inflight") == "queued"
    _ = STRIPE_SECRET
