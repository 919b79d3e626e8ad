"""``webhooks listen`` as a developer runs it (docs/listen.md): against ``webhooks serve`` and against
the Procfile's web process on PostgreSQL + Redis, with the receiver stopped and started mid-stream;
posting with the provider's own headers (the Stripe SDK verifies them at the local URL) or with
Standard Webhooks (the Standard Webhooks SDK verifies them); stopped with Ctrl-C and started
again. Every event arrives once, none under a new id; a web process with listeners stops at once."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
import standardwebhooks
import stripe

from tests.conftest import ADMIN_PASSWORD, STRIPE_SECRET, free_port, stripe_event, stripe_headers, wait_until
from tests.support.processes import BIN, clean_env, gunicorn_cmd, wait_http
from tests.support.servers import serve_in_thread

pytestmark = pytest.mark.slow
STOP_TIMEOUT = "20"  # the web processes' graceful stop: a stream that held it would take this long


class Sink:
    """The developer's local handler: records each post, verified as their code would verify it."""

    def __init__(self, verify: Any) -> None:
        self.received: list[tuple[str, bool]] = []  # (event id, verified)
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                sink.received.append(verify(body, {k: v for k, v in self.headers.items()}))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks"
        serve_in_thread(self.server)

    def ids(self) -> list[str]:
        return [event_id for event_id, _ in self.received]


def stripe_verified(body: bytes, headers: dict[str, str]) -> tuple[str, bool]:
    try:
        event = stripe.Webhook.construct_event(body.decode(), headers["Stripe-Signature"], STRIPE_SECRET)
    except (stripe.SignatureVerificationError, KeyError):
        return json.loads(body)["id"], False
    return str(event["id"]), True


@contextmanager
def sink(verify: Any) -> Iterator[Sink]:
    found = Sink(verify)
    try:
        yield found
    finally:
        found.server.shutdown()


def post(base: str, event_id: str) -> None:
    body = stripe_event(event_id)
    answer = requests.post(f"{base}/webhooks/stripe", data=body, headers=stripe_headers(body), timeout=30)
    assert answer.status_code == 200, answer.text


def webhooks(*args: str, env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run([str(BIN / "webhooks"), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def start_listen(base: str, token: str, target: str, state: Path, env: dict[str, str], *extra: str) -> Any:
    log = (state.parent / f"{state.stem}.log").open("a")
    return subprocess.Popen(
        [
            str(BIN / "webhooks"),
            "listen",
            base,
            "--token",
            token,
            "--forward-to",
            target,
            "--state",
            str(state),
            *extra,
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )


def stop_within(proc: Any, bound: float) -> float:
    """SIGTERM ``proc``; the seconds it took to exit (fails past ``bound``)."""
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=bound)
    return time.monotonic() - started


def test_listen_to_serve_through_a_restart_and_a_ctrl_c(tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = clean_env(
        STRIPE_WEBHOOK_SECRET=STRIPE_SECRET,
        WEBHOOKS_ADMIN_PASSWORD=ADMIN_PASSWORD,
        WEB_CONCURRENCY="2",
        WEB_THREADS="8",
        WEBHOOKS_STOP_TIMEOUT=STOP_TIMEOUT,
    )
    webhooks("db", "upgrade", env=env, cwd=tmp_path)
    token = webhooks("tokens", "create", "laptop", "--read-only", env=env, cwd=tmp_path).strip().splitlines()[-1]
    serve_cmd = [str(BIN / "webhooks"), "serve", "--port", str(port)]

    def serve() -> Any:
        proc = subprocess.Popen(serve_cmd, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_http(f"{base}/healthz")
        return proc

    state = tmp_path / "state.json"
    server = serve()
    listener = None
    with sink(stripe_verified) as local:
        try:
            listener = start_listen(base, token, local.url, state, env)
            wait_until(
                lambda: requests.get(f"{base}/admin/api/listeners", auth=("admin", ADMIN_PASSWORD), timeout=5).json()[
                    "listeners"
                ]
            )
            first = [f"evt_listen_{i}" for i in range(5)]
            for event_id in first:
                post(base, event_id)
            wait_until(lambda: len(local.received) >= 5)

            took = stop_within(server, 15)
            assert took < float(STOP_TIMEOUT) / 2, f"serve took {took:.1f} s to stop with a listener attached"
            server = serve()
            second = [f"evt_listen_{i}" for i in range(5, 10)]
            for event_id in second:
                post(base, event_id)
            wait_until(lambda: len(local.received) >= 10)

            listener.send_signal(signal.SIGINT)  # Ctrl-C
            assert listener.wait(timeout=30) == 0
            output = (tmp_path / "state.log").read_text()
            assert "stopped: posted 10 events, 0 failed" in output, output
            third = ["evt_listen_10", "evt_listen_11"]
            for event_id in third:
                post(base, event_id)  # while the laptop is off
            listener = start_listen(base, token, local.url, state, env)
            wait_until(lambda: len(local.received) >= 12)
            time.sleep(1.5)  # a window in which a repeat would show, not an order of events
            assert local.ids() == first + second + third
            assert all(verified for _, verified in local.received)
        finally:
            for proc in (listener, server):
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(timeout=30)

        # The same events again, replayed with --since and signed with Standard Webhooks under the
        # secret listen prints: the SDK verifies each, and the ids are the events' own.
        server = serve()
        standard_state = tmp_path / "standard.json"
        received: list[tuple[str, bool]] = []

        def standard_verified(body: bytes, headers: dict[str, str]) -> tuple[str, bool]:
            secret = json.loads(standard_state.read_text())["secret"]
            try:
                standardwebhooks.Webhook(secret).verify(body, {k.lower(): v for k, v in headers.items()})
                ok = True
            except standardwebhooks.webhooks.WebhookVerificationError:
                ok = False
            received.append((headers["Webhooks-Event-Id"], ok))
            return headers["Webhooks-Event-Id"], ok

        with sink(standard_verified) as standard:
            listener = start_listen(
                base, token, standard.url, standard_state, env, "--headers", "standard", "--since", "10m"
            )
            try:
                wait_until(lambda: len(standard.received) >= 12)
                assert standard.ids() == first + second + third
                assert all(ok for _, ok in standard.received)
                printed = (tmp_path / "standard.log").read_text()
                assert json.loads(standard_state.read_text())["secret"] in printed
            finally:
                listener.send_signal(signal.SIGTERM)
                listener.wait(timeout=30)
                stop_within(server, 30)


def test_listen_to_the_procfiles_web_process_on_postgres(pg_url: str, redis_url: str, tmp_path: Path) -> None:
    """The Procfile's web command (gunicorn, two processes) on PostgreSQL: events stored by either
    process reach the listener; the web processes restarted mid-stream lose and repeat nothing."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = clean_env(
        DATABASE_URL=pg_url,
        REDIS_URL=redis_url,
        STRIPE_WEBHOOK_SECRET=STRIPE_SECRET,
        WEBHOOKS_ADMIN_PASSWORD=ADMIN_PASSWORD,
        WEB_CONCURRENCY="2",
        WEB_THREADS="8",
        WEBHOOKS_STOP_TIMEOUT=STOP_TIMEOUT,
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path),
    )
    webhooks("db", "upgrade", env=env, cwd=tmp_path)
    token = webhooks("tokens", "create", "pg-laptop", env=env, cwd=tmp_path).strip().splitlines()[-1]

    def web() -> Any:
        proc = subprocess.Popen(gunicorn_cmd(port), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_http(f"{base}/healthz")
        return proc

    server = web()
    listener = None
    with sink(stripe_verified) as local:
        try:
            listener = start_listen(base, token, local.url, tmp_path / "pg.json", env)
            wait_until(
                lambda: requests.get(f"{base}/admin/api/listeners", auth=("admin", ADMIN_PASSWORD), timeout=5).json()[
                    "listeners"
                ]
            )
            ids = [f"evt_pg_listen_{i}" for i in range(12)]
            for event_id in ids[:6]:
                post(base, event_id)
            wait_until(lambda: len(local.received) >= 6)
            took = stop_within(server, 15)
            assert took < float(STOP_TIMEOUT) / 2, f"gunicorn took {took:.1f} s to stop with a listener attached"
            server = web()
            for event_id in ids[6:]:
                post(base, event_id)
            wait_until(lambda: len(local.received) >= 12)
            time.sleep(1.5)  # a window in which a repeat would show, not an order of events
            assert local.ids() == ids and all(ok for _, ok in local.received)
            listed = requests.get(f"{base}/admin/api/listeners", auth=("admin", ADMIN_PASSWORD), timeout=5).json()
            ours = [entry for entry in listed["listeners"] if entry["who"] == "pg-laptop"]
            assert ours[-1]["ended_because"] == "stopping" and ours[0]["resumed_from"]  # audited, then resumed
        finally:
            for proc in (listener, server):
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(timeout=30)
