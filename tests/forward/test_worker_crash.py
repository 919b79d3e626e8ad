"""Forwarding in the real processes: a ``webhooks worker`` killed mid-request leaves a lease that a
new worker sends again under the same ``webhook-id``; a Redis outage stops no delivery (the forwarder
needs only the database); ``webhooks serve`` forwards on SQLite with its embedded worker."""

from __future__ import annotations

import signal
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import (
    STRIPE_SECRET,
    base_config,
    free_port,
    make_app,
    rows,
    stripe_event,
    stripe_headers,
    wait_until,
)
from tests.faults.conftest import Proc, processes, worker
from tests.faults.conftest import redis_server as redis_server  # the fixture: a Redis this test may stop
from tests.faults.services import Redis
from tests.forward.conftest import Script, post, serving, statuses
from tests.support import destination
from tests.support.processes import BIN, clean_env, running, wait_http
from webhooks.forward.signing import message_id

pytestmark = pytest.mark.slow


def toml(path: Path, url: str, **extra: Any) -> Path:
    """A ``webhooks.toml``: the stripe endpoint forwarding to destination d at ``url``."""
    options = "".join(f"{k} = {v}\n" for k, v in extra.items())
    path.write_text(
        f'[endpoints.stripe]\nprovider = "stripe"\nsecrets = ["{STRIPE_SECRET}"]\nforward = ["d"]\n\n'
        f'[destinations.d]\nurl = "{url}"\nsecrets = ["{destination.SECRET}"]\nallow_private = true\n{options}'
    )
    return path


def start_worker(pg_url: str, redis_url: str, config: Path, tmp: Path, name: str) -> Proc:
    env = clean_env(DATABASE_URL=pg_url, REDIS_URL=redis_url, WEBHOOKS_CONFIG=str(config), WEBHOOKS_LOG_LEVEL="WARNING")
    return worker(env, tmp, name)


def test_a_worker_killed_mid_request_is_sent_again_with_the_same_id(
    pg_url: str, redis_server: Redis, tmp_path: Path
) -> None:
    gate = threading.Event()

    def first_hangs(n: int) -> destination.Answer:
        if n == 1:
            gate.wait(60)  # answered, if ever, to a worker that is gone
        return (200, {}, b"ok")

    script = Script(plan=first_hangs)
    with serving(script) as service, processes() as procs:
        config = toml(tmp_path / "webhooks.toml", service.url, timeout_seconds=1, retry_schedule="[0.3]")
        app = make_app(base_config(pg_url, REDIS_URL=redis_server.url, WEBHOOKS_CONFIG=str(config)))
        first = start_worker(pg_url, redis_server.url, config, tmp_path, "first")
        procs.append(first)
        assert post(app, stripe_event("evt_crash")) == 200
        wait_until(lambda: service.seen, timeout=90, interval=0.01)  # the first request hangs
        first.signal(signal.SIGKILL)  # within its 1 s timeout
        first.popen.wait(30)
        assert rows(app, "SELECT count(*) FROM delivery_attempts")[0][0] == 0, first.tail()
        assert statuses(app) == {"evt_crash/d": "pending"}
        procs.append(start_worker(pg_url, redis_server.url, config, tmp_path, "second"))
        wait_until(lambda: statuses(app) == {"evt_crash/d": "delivered"}, timeout=90, interval=0.1)
        gate.set()
    sent = message_id("stripe", "evt_crash", "d")
    assert [s.id for s in service.seen] == [sent, sent] and all(s.verified for s in service.seen)
    attempts = rows(app, "SELECT outcome FROM delivery_attempts")
    assert [tuple(r) for r in attempts] == [("delivered",)]  # the killed request left no result
    assert rows(app, "SELECT attempts FROM deliveries")[0][0] == 1


def test_a_redis_outage_while_forwarding_loses_nothing(pg_url: str, redis_server: Redis, tmp_path: Path) -> None:
    down = threading.Event()
    down.set()
    script = Script(plan=lambda n: (500, {}, b"not yet") if down.is_set() else (200, {}, b"ok"))
    with serving(script) as service, processes() as procs:
        config = toml(
            tmp_path / "webhooks.toml",
            service.url,
            retry_schedule="[" + ", ".join(["0.3"] * 40) + "]",
            circuit_failures=1000,
        )
        app = make_app(base_config(pg_url, REDIS_URL=redis_server.url, WEBHOOKS_CONFIG=str(config)))
        procs.append(start_worker(pg_url, redis_server.url, config, tmp_path, "w"))
        events = [f"evt_r{n}" for n in range(5)]
        for event_id in events:
            assert post(app, stripe_event(event_id)) == 200
        wait_until(lambda: len(statuses(app)) == len(events) and script.answered, timeout=90)
        redis_server.stop()  # deliveries are pending (and failing); the queue is gone
        down.clear()
        wait_until(lambda: set(statuses(app).values()) == {"delivered"}, timeout=60, interval=0.1)
        redis_server.start()  # empty
        assert post(app, stripe_event("evt_after")) == 200
        wait_until(lambda: statuses(app).get("evt_after/d") == "delivered", timeout=90, interval=0.1)
    expected = {message_id("stripe", e, "d") for e in [*events, "evt_after"]}
    assert Counter(a.id for a in script.ok()) == dict.fromkeys(expected, 1)


def test_webhooks_serve_forwards_on_sqlite(tmp_path: Path) -> None:
    script = Script()
    port = free_port()
    with serving(script) as service:
        toml(tmp_path / "webhooks.toml", service.url)
        env = clean_env()
        del env["WEBHOOKS_CONFIG"]  # unset: the default, ./webhooks.toml of its (temporary) working directory
        with running([str(BIN / "webhooks"), "serve", "--port", str(port)], env, cwd=tmp_path) as proc:
            threading.Thread(target=proc.stdout.read, daemon=True).start()  # type: ignore[union-attr]
            base = f"http://127.0.0.1:{port}"
            wait_http(base + "/")
            body = stripe_event("evt_serve")
            assert requests.post(f"{base}/webhooks/stripe", data=body, headers=stripe_headers(body), timeout=30).ok
            wait_until(lambda: script.ok(), timeout=60)
    [seen] = service.seen
    assert seen.verified and seen.body == body and seen.id == message_id("stripe", "evt_serve", "d")
