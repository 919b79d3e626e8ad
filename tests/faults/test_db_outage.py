"""PostgreSQL stopped and started under load: while it is down the receiver answers only 503 (with
Retry-After), every event that got a 2xx is in the database afterwards, and the receiver recovers
without a restart."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import requests
import sqlalchemy as sa

from tests.conftest import stripe_event, stripe_headers, wait_until
from tests.faults.conftest import gunicorn, processes, service_env
from tests.faults.services import Postgres, Redis

pytestmark = pytest.mark.slow


def test_database_outage_under_load(postgres: Postgres, database: str, redis_server: Redis, tmp_path: Path) -> None:
    env = service_env(database, redis_server.url)
    acked: list[str] = []
    # 2xx answers both sent and answered while PostgreSQL was down (before its restart began): none
    # may exist. A request sent while down may wait and be answered 200 once it is back (stored
    # then: every acknowledged event is checked below); (event id, seconds after stop() returned).
    down_acked: list[tuple[str, float]] = []
    stopped_at = [0.0]
    answers: Counter[tuple[str, int]] = Counter()
    lock = threading.Lock()
    phase = ["up"]
    stop = threading.Event()
    with processes() as procs:
        web, base = gunicorn(env, tmp_path, workers=2, threads=4)
        procs.append(web)
        counter = iter(range(10**9))

        def sender() -> None:
            session = requests.Session()
            while not stop.is_set():
                with lock:
                    event_id = f"evt_outage_{next(counter)}"
                    during = phase[0]
                body = stripe_event(event_id)
                try:
                    response = session.post(
                        f"{base}/webhooks/stripe", data=body, headers=stripe_headers(body), timeout=30
                    )
                except requests.ConnectionError:
                    continue
                with lock:
                    answers[(during, response.status_code)] += 1
                    if response.status_code == 200:
                        acked.append(event_id)
                        if during == "down" and phase[0] == "down":
                            down_acked.append((event_id, time.monotonic() - stopped_at[0]))
                    if response.status_code == 503:
                        assert response.headers.get("Retry-After", "").isdigit()

        threads = [threading.Thread(target=sender) for _ in range(8)]
        for t in threads:
            t.start()
        wait_until(lambda: len(acked) > 100)
        with lock:
            phase[0] = "stopping"
        stopping = time.monotonic()
        postgres.stop()
        with lock:
            phase[0] = "down"
            stopped_at[0] = time.monotonic()
        print(
            f"PostgreSQL stopped in {stopped_at[0] - stopping:.2f} s (exit status {postgres.proc and postgres.proc.returncode})"
        )
        # Down until the senders have met the outage many times (a fixed sleep proves nothing on
        # a machine too busy to send meanwhile).
        wait_until(lambda: answers[("down", 503)] >= 200)
        with lock:
            phase[0] = "restarting"
        postgres.start()
        with lock:
            phase[0] = "back"
        recovered = len(acked)
        wait_until(lambda: len(acked) > recovered + 100)  # no restart of gunicorn needed
        stop.set()
        for t in threads:
            t.join(timeout=60)
    print(f"database outage: {dict(answers)}")
    assert answers[("down", 503)] > 0
    assert {code for (_, code) in answers} <= {200, 503}, dict(answers)
    engine = sa.create_engine(database)
    with engine.connect() as conn:
        stored = {r[0] for r in conn.execute(sa.text("SELECT event_id FROM events"))}
    engine.dispose()
    # Which server answered, if one did: an event stored here was committed by this cluster.
    assert not down_acked, [(e, round(after, 3), e in stored) for e, after in down_acked]
    assert set(acked) <= stored
