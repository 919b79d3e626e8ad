"""The storm: 2 000 distinct events (Stripe and Adyen, 400 objects with several versions each),
each delivered 3 times in a shuffled order by 32 concurrent senders, while Redis is stopped and
started again (losing everything: no persistence) and a worker is SIGKILLed. Afterwards: exactly
2 000 rows, all processed, every effect exactly once, every object at its newest version, no 5xx."""

from __future__ import annotations

import json
import random
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import requests
import sqlalchemy as sa

from tests.conftest import ADYEN_KEY, STRIPE_SECRET, stripe_event, wait_until
from tests.faults.conftest import gunicorn, processes, service_env, worker
from tests.faults.services import Redis
from webhooks.providers.adyen import Adyen
from webhooks.providers.base import Endpoint
from webhooks.providers.stripe import Stripe

pytestmark = pytest.mark.slow
STRIPE_OBJECTS, STRIPE_VERSIONS = 200, 6  # 1 200 events
ADYEN_PAYMENTS = 200  # × AUTHORISATION, CAPTURE, REFUND, CHARGEBACK = 800 events
SENDERS, COPIES = 32, 3
STALL_SECONDS = 120  # not one more event processed for this long: stuck, not slow
ENDPOINTS = {
    "stripe": (Stripe(), Endpoint("stripe", "stripe", (STRIPE_SECRET,))),
    "adyen": (Adyen(), Endpoint("adyen", "adyen", (ADYEN_KEY,))),
}


def signed(endpoint: str, body: bytes) -> tuple[bytes, dict[str, str]]:
    """Signed when sent, as the provider signs each attempt: a storm on a slow machine may last
    longer than Stripe's tolerance."""
    provider, config = ENDPOINTS[endpoint]
    return provider.sign(config, body, now=time.time())


def deliveries() -> tuple[list[tuple[str, bytes]], dict[tuple[str, str, str], int]]:
    """(endpoint, unsigned body) for every event, and the newest version expected per object."""
    created = int(time.time()) - 3600
    out: list[tuple[str, bytes]] = []
    newest: dict[tuple[str, str, str], int] = {}
    for o in range(STRIPE_OBJECTS):
        for v in range(STRIPE_VERSIONS):
            body = stripe_event(
                f"evt_storm_{o}_{v}",
                "payment_intent.updated",
                created + v,
                {"id": f"pi_storm_{o}", "object": "payment_intent", "v": v},
            )
            out.append(("stripe", body))
        newest[("stripe", "payment_intent", f"pi_storm_{o}")] = (created + STRIPE_VERSIONS - 1) * 10000 + 1
    for p in range(ADYEN_PAYMENTS):
        for n, code in enumerate(("AUTHORISATION", "CAPTURE", "REFUND", "CHARGEBACK")):
            date = f"2024-01-01T10:0{n}:00+00:00"
            item: dict[str, Any] = {
                "amount": {"currency": "EUR", "value": 1000 + p},
                "eventCode": code,
                "eventDate": date,
                "merchantAccountCode": "Storm",
                "merchantReference": f"order-{p}",
                "success": "true",
                "pspReference": f"PSP{p}" if n == 0 else f"MOD{p}{code[:3]}",
                "originalReference": "" if n == 0 else f"PSP{p}",
            }
            body = json.dumps({"live": "false", "notificationItems": [{"NotificationRequestItem": item}]}).encode()
            out.append(("adyen", body))
        newest[("adyen", "payment", f"PSP{p}")] = 4  # a payment's version: how many notifications it folded
    return out, newest


def test_storm(database: str, redis_server: Redis, tmp_path: Path, record_property: pytest.RecordProperty) -> None:
    events, newest = deliveries()
    assert len(events) == 2000
    sends = events * COPIES
    random.Random(5).shuffle(sends)
    env = service_env(database, redis_server.url)
    statuses: Counter[int] = Counter()
    failures: list[str] = []
    lock = threading.Lock()
    with processes() as procs:
        web, base = gunicorn(env, tmp_path, workers=2, threads=8)
        procs.append(web)
        victim = worker(env, tmp_path, "victim")
        procs += [victim, worker(env, tmp_path, "steady")]
        todo = iter(enumerate(sends))
        started = time.monotonic()

        def sender() -> None:
            session = requests.Session()
            while True:
                with lock:
                    nxt = next(todo, None)
                if nxt is None:
                    return
                _, (endpoint, raw) = nxt
                body, headers = signed(endpoint, raw)
                for _attempt in range(3):  # a reset connection is retried, like a provider would
                    try:
                        code = session.post(
                            f"{base}/webhooks/{endpoint}", data=body, headers=headers, timeout=30
                        ).status_code
                        break
                    except requests.ConnectionError as exc:
                        code = -1
                        with lock:
                            failures.append(exc.__class__.__name__)
                with lock:
                    statuses[code] += 1

        threads = [threading.Thread(target=sender) for _ in range(SENDERS)]
        for t in threads:
            t.start()
        # Faults while the storm is on: Redis goes away for a few seconds, a worker is killed.
        wait_until(lambda: sum(statuses.values()) > len(sends) // 5, timeout=300)
        redis_server.stop()
        # Down until hundreds of deliveries met the outage (a fixed sleep proves nothing on a
        # machine too busy to send meanwhile).
        at_stop = sum(statuses.values())
        wait_until(lambda: sum(statuses.values()) >= at_stop + 300, timeout=300)
        redis_server.start()
        redis_back = time.monotonic()
        wait_until(lambda: sum(statuses.values()) > len(sends) // 2, timeout=300)
        victim.signal(signal.SIGKILL)
        procs.append(worker(env, tmp_path, "successor"))
        for t in threads:
            t.join(timeout=600)
        sent = time.monotonic() - started

        engine = sa.create_engine(database)

        progress: list[Any] = [None, time.monotonic()]  # events left, when that number last changed

        def settled() -> bool:
            with engine.connect() as conn:
                stuck = conn.execute(
                    sa.text(
                        "SELECT event_id, status, attempts FROM events WHERE status <> 'processed' ORDER BY event_id"
                    )
                ).all()
            if len(stuck) != progress[0]:
                progress[:] = [len(stuck), time.monotonic()]
            # As long as it takes on a loaded machine, but an event stuck for minutes is a failure.
            assert time.monotonic() - progress[1] < STALL_SECONDS, f"not processed, stalled: {stuck[:10]}"
            return not stuck

        wait_until(settled, timeout=900, interval=0.5)
        done = time.monotonic() - started
        since_redis = time.monotonic() - redis_back
    record_property("storm_send_s", round(sent, 1))
    record_property("storm_total_s", round(done, 1))
    print(
        f"storm: {len(sends)} deliveries sent in {sent:.1f} s ({len(sends) / sent:.0f} req/s), "
        f"2000 events processed in {done:.1f} s ({2000 / done:.0f} events/s); "
        f"all processed {since_redis:.1f} s after Redis came back; statuses {dict(statuses)}"
    )
    assert set(statuses) == {200}, (dict(statuses), failures[:5], web.tail())
    with engine.connect() as conn:
        assert conn.execute(
            sa.text("SELECT count(*), count(*) FILTER (WHERE status = 'processed') FROM events")
        ).one() == (2000, 2000)
        effects = dict(conn.execute(sa.text("SELECT n, count(*) FROM fault_effects GROUP BY n")).all())
        assert effects == {1: 2000}, effects
        stored = {
            (p, t, i): v
            for p, t, i, v in conn.execute(sa.text("SELECT endpoint, object_type, object_id, version FROM objects"))
        }
    engine.dispose()
    assert stored == newest
