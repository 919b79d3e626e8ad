"""Scale-out: two web instances (separate gunicorn masters) and two workers on one PostgreSQL and
one Redis store every event once and process it once under a storm of repeated deliveries."""

from __future__ import annotations

import contextlib
import random
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
import sqlalchemy as sa

from tests import sample_handlers
from tests.conftest import STRIPE_SECRET, free_port, stripe_event, stripe_headers, wait_until
from tests.support.processes import BIN, clean_env, gunicorn_cmd, running, wait_http
from tests.support.templates import migrated

pytestmark = pytest.mark.slow
EVENTS = 150  # each delivered three times: hundreds of requests prove the bound


def test_two_web_instances_and_two_workers_store_and_process_each_event_once(pg_url: str, redis_url: str) -> None:
    migrated(pg_url)
    engine = sa.create_engine(pg_url)
    sample_handlers.create_tables(engine)
    env = clean_env(
        DATABASE_URL=pg_url,
        REDIS_URL=redis_url,
        WEBHOOKS_HANDLERS="tests.sample_handlers",
        STRIPE_WEBHOOK_SECRET=STRIPE_SECRET,
        WEB_CONCURRENCY="1",
        WEB_THREADS="8",
    )
    ports = [free_port(), free_port()]
    with contextlib.ExitStack() as stack:
        for port in ports:  # two masters: two deployments of the web process
            cmd = gunicorn_cmd(port)
            proc = stack.enter_context(running(cmd, env))
            threading.Thread(target=proc.stdout.read, daemon=True).start()  # type: ignore[union-attr]
        for _ in range(2):
            proc = stack.enter_context(running([str(BIN / "webhooks"), "worker"], env))
            threading.Thread(target=proc.stdout.read, daemon=True).start()  # type: ignore[union-attr]
        for port in ports:
            wait_http(f"http://127.0.0.1:{port}/")
        # The storm: every event three times, in a shuffled order, to either instance at random.
        bodies = [stripe_event(f"evt_scale_{i}", created=1700000000 + i) for i in range(EVENTS)]
        deliveries = [(random.choice(ports), body) for body in bodies * 3]
        random.shuffle(deliveries)

        def post(delivery: tuple[int, bytes]) -> int:
            port, body = delivery
            url = f"http://127.0.0.1:{port}/webhooks/stripe"
            return requests.post(url, data=body, headers=stripe_headers(body), timeout=60).status_code

        with ThreadPoolExecutor(16) as pool:
            statuses = list(pool.map(post, deliveries))
        assert statuses == [200] * len(deliveries)

        def settled() -> bool:
            with engine.connect() as conn:
                return (
                    conn.execute(sa.text("SELECT count(*) FROM events WHERE status = 'processed'")).scalar() == EVENTS
                )

        wait_until(settled, timeout=180)
    with engine.connect() as conn:
        stored = conn.execute(sa.text("SELECT count(*), count(DISTINCT event_id), max(attempts) FROM events")).one()
        calls = conn.execute(sa.text("SELECT count(*), count(DISTINCT event_id) FROM test_handler_calls")).one()
    engine.dispose()
    assert tuple(stored) == (EVENTS, EVENTS, 1)  # stored once each, one attempt each
    assert tuple(calls) == (EVENTS, EVENTS)  # the handler ran once per event
