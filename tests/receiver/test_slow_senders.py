"""Slow senders against the Procfile's gunicorn: connections dripping their request head or body a
byte at a time neither stop genuine deliveries nor stay forever (each is answered 408 and closed)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.conftest import STRIPE_SECRET, free_port, stripe_event, stripe_headers, wait_until
from tests.support.drippers import dripping
from tests.support.processes import clean_env, gunicorn_cmd, running, wait_http
from tests.support.templates import migrated

pytestmark = pytest.mark.slow


@pytest.fixture
def web(tmp_path: Path) -> Iterator[int]:
    """gunicorn exactly as the Procfile starts it (its defaults: no WEB_* variables), on SQLite; its port."""
    url = f"sqlite:///{tmp_path / 'webhooks.db'}"
    migrated(url)
    port = free_port()
    env = clean_env(DATABASE_URL=url, STRIPE_WEBHOOK_SECRET=STRIPE_SECRET, PORT=str(port))
    env = {k: v for k, v in env.items() if not k.startswith("WEB_")}
    with running(gunicorn_cmd(port), env, cwd=tmp_path) as proc:
        threading.Thread(target=proc.stdout.read, daemon=True).start()  # type: ignore[union-attr]
        wait_http(f"http://127.0.0.1:{port}/healthz")
        yield port


def genuine(port: int, event_id: str) -> int:
    """One signed Stripe delivery on a new connection; its status (a client timeout raises)."""
    body = stripe_event(event_id)
    # Generous for a loaded machine; old gunicorn settings never answered until the drippers stopped.
    return requests.post(
        f"http://127.0.0.1:{port}/webhooks/stripe", data=body, headers=stripe_headers(body), timeout=10
    ).status_code


def test_genuine_deliveries_are_answered_while_200_connections_drip(web: int) -> None:
    with dripping(web, 100, "head") as heads, dripping(web, 100, "body") as bodies:
        wait_until(lambda: heads.dripping(3) and bodies.dripping(3), timeout=60)
        for n in range(3):
            assert genuine(web, f"evt_genuine_{n}") == 200
            # The server held them meanwhile: the drippers were not simply dropped to make room.
            assert heads.still_open() + bodies.still_open() >= 100
        # ...and each is dropped in the end, with a 408 where an answer is possible.
        wait_until(lambda: not heads.still_open() and not bodies.still_open(), timeout=120)
        for answer in [*heads.answers.values(), *bodies.answers.values()]:
            assert answer.startswith(b"HTTP/1.1 408") and b'"request_timeout"' in answer, answer[:300]
        # Dropped drippers that keep sending hold nothing either.
        assert genuine(web, "evt_after") == 200


def test_kept_alive_connections_wait_in_the_poller_and_serve_again(web: int) -> None:
    """Idle kept-alive connections hold no thread: more of them than threads leave room for a new
    delivery, and each serves its next request (within gunicorn's 5 s keepalive)."""
    sessions = [requests.Session() for _ in range(20)]
    try:
        for round_ in ("first", "again"):
            for n, session in enumerate(sessions):
                body = stripe_event(f"evt_ka_{round_}_{n}")
                assert (
                    session.post(
                        f"http://127.0.0.1:{web}/webhooks/stripe", data=body, headers=stripe_headers(body), timeout=10
                    ).status_code
                    == 200
                )
            assert genuine(web, f"evt_ka_new_{round_}") == 200
    finally:
        for session in sessions:
            session.close()
