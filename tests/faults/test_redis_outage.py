"""Redis goes away while a worker is busy: the worker outlives the outage (RQ's constructor and
loop talk to Redis, and the process used to end there) and every event is processed exactly once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.faults.conftest import gunicorn, processes, service_env, worker
from tests.faults.services import Redis
from tests.support.processes import one, post, status

pytestmark = pytest.mark.slow
OUTAGE_SECONDS = 6  # longer than the 3 s job, and than RQ's own reconnect wait


def test_worker_survives_redis_stopped_mid_job(database: str, redis_server: Redis, tmp_path: Path) -> None:
    env = service_env(database, redis_server.url)
    with processes() as procs:
        web, base = gunicorn(env, tmp_path, workers=1, threads=2)
        procs.append(web)
        busy = worker(env, tmp_path, "busy")
        procs.append(busy)
        post(base, "evt_during")
        wait_until(lambda: status(database, "evt_during") == "processing")
        redis_server.stop()
        down_until = time.monotonic() + OUTAGE_SECONDS
        # While Redis is down deliveries are still stored (received) and acknowledged.
        post(base, "evt_while_down", "payment_intent.succeeded")
        time.sleep(max(0.0, down_until - time.monotonic()))  # the outage's length, not an ordering
        assert busy.popen.poll() is None, busy.tail()
        redis_server.start()  # empty: the sweeper rebuilds the queue from the database
        post(base, "evt_after", "payment_intent.succeeded")
        for event_id in ("evt_during", "evt_while_down", "evt_after"):
            wait_until(lambda e=event_id: status(database, e) == "processed", timeout=120, interval=0.2)
        assert busy.popen.poll() is None, busy.tail()
    assert one(database, "SELECT count(*), min(n), max(n) FROM fault_effects") == (3, 1, 1)
