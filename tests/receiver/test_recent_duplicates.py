"""A duplicate of an event this process lately saw in the database is answered without asking it
(``webhooks.store.recent``), and only then: verified first, per process, for a bounded time, forgotten
when tombstones expire.

"Without asking the database" is shown by refusing every connection to the test's database (its
``ALLOW_CONNECTIONS`` off, its sessions terminated): a delivery that needs the database is then
answered 503, one answered from the cache is answered 200.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import prometheus_client
import pytest
import sqlalchemy as sa
from flask import Flask
from sqlalchemy.engine import make_url

from tests.conftest import base_config, drain, make_app, rows, runtime, stripe_event, stripe_headers
from tests.support.catalogue import all_endpoints, genuine
from webhooks.receiver import batch
from webhooks.store.purge import Plan, expire_tombstones, purge
from webhooks.store.recent import Recent


@pytest.fixture
def pg_app(pg_url: str, redis_url: str) -> Flask:
    return make_app(base_config(pg_url, REDIS_URL=redis_url))


@contextlib.contextmanager
def database_refused(app: Flask, pg_admin_url: str) -> Iterator[None]:
    """No connection to the app's database succeeds, and those open are closed, until the end."""
    name = make_url(runtime(app).settings.database_url).database
    admin = sa.create_engine(pg_admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false'))
        conn.execute(
            sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :name"), {"name": name}
        )
    try:
        yield
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))
        admin.dispose()


def post(app: Flask, event_id: str, **signing: Any) -> int:
    body = stripe_event(event_id)
    return app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body, **signing)).status_code


def deliveries(outcome: str) -> float:
    labels = {"endpoint": "stripe", "outcome": outcome}
    return prometheus_client.REGISTRY.get_sample_value("webhooks_deliveries_total", labels) or 0.0


def test_a_duplicate_of_a_recent_event_needs_no_database(pg_app: Flask, pg_admin_url: str) -> None:
    assert post(pg_app, "evt_stored") == 200
    before = deliveries("duplicate")
    with database_refused(pg_app, pg_admin_url):
        assert post(pg_app, "evt_stored") == 200  # from this process's cache
        assert post(pg_app, "evt_new") == 503  # the database is needed, and refused
    assert deliveries("duplicate") == before + 1
    assert rows(pg_app, "SELECT event_id FROM events ORDER BY event_id") == [("evt_stored",)]


def test_a_duplicate_the_database_found_is_remembered_too(pg_app: Flask, pg_admin_url: str) -> None:
    assert post(pg_app, "evt_1") == 200
    batch.committer(runtime(pg_app)).recent.forget()  # as in a process that did not store it
    assert post(pg_app, "evt_1") == 200  # asked the database, which holds it
    with database_refused(pg_app, pg_admin_url):
        assert post(pg_app, "evt_1") == 200


def test_cached_duplicates_are_counted_as_duplicates(pg_app: Flask) -> None:
    assert post(pg_app, "evt_1") == 200
    before = deliveries("duplicate")
    for _ in range(3):
        assert post(pg_app, "evt_1") == 200
    batch.committer(runtime(pg_app)).duplicates.flush()
    assert rows(pg_app, "SELECT event_id, count FROM duplicates") == [("evt_1", 3)]
    assert deliveries("duplicate") == before + 3
    drain(pg_app)  # and the event itself was queued once, processed once
    assert rows(pg_app, "SELECT status, attempts FROM events") == [("processed", 1)]


def test_a_cached_duplicate_still_needs_a_valid_signature(pg_app: Flask, pg_admin_url: str) -> None:
    """An attacker who knows a stored id gets nothing from the cache: no 200, no count."""
    assert post(pg_app, "evt_1") == 200
    before = deliveries("duplicate")
    forged = stripe_event("evt_1", type_="charge.refunded")  # another body under the known id
    honest = stripe_headers(stripe_event("evt_1"))
    with database_refused(pg_app, pg_admin_url):
        assert post(pg_app, "evt_1", secret="whsec_wrong") == 400
        client = pg_app.test_client()
        assert client.post("/webhooks/stripe", data=forged, headers=honest).status_code == 400
        assert client.post("/webhooks/stripe", data=stripe_event("evt_1")).status_code == 400  # unsigned
    assert deliveries("duplicate") == before
    batch.committer(runtime(pg_app)).duplicates.flush()
    assert rows(pg_app, "SELECT count(*) FROM duplicates") == [(0,)]


def test_the_cache_is_per_process(pg_url: str, redis_url: str, pg_admin_url: str) -> None:
    """Another process (here another app: its own runtime and committer) asks the database."""
    first = make_app(base_config(pg_url, REDIS_URL=redis_url))
    second = make_app(base_config(pg_url, REDIS_URL=redis_url))
    assert post(first, "evt_1") == 200
    with database_refused(first, pg_admin_url):
        assert post(first, "evt_1") == 200
        assert post(second, "evt_1") == 503  # never saw it: the database decides, and is refused
    assert post(second, "evt_1") == 200
    assert rows(second, "SELECT count(*) FROM events") == [(1,)]


def test_a_confirmation_lasts_its_ttl_and_a_hit_does_not_extend_it(pg_app: Flask, pg_admin_url: str) -> None:
    now = [1000.0]
    committer = batch.committer(runtime(pg_app))
    committer.recent = Recent(ttl=60, clock=lambda: now[0])
    assert post(pg_app, "evt_1") == 200
    now[0] += 59
    with database_refused(pg_app, pg_admin_url):
        assert post(pg_app, "evt_1") == 200
        now[0] += 2  # 61 s after the database confirmed it: asked again
        assert post(pg_app, "evt_1") == 503


def test_purged_then_tombstones_expired_is_new_again(pg_app: Flask) -> None:
    """Purged (tombstoned): still a duplicate. Once its tombstone expires, this process forgets
    the id at once: the next delivery is stored, not answered from the cache."""
    assert post(pg_app, "evt_1") == 200
    drain(pg_app)
    rt = runtime(pg_app)
    assert purge(rt.sessions, Plan(timedelta(0), timedelta(0)), kinds=set(), force=True) == 1
    assert post(pg_app, "evt_1") == 200
    assert rows(pg_app, "SELECT count(*) FROM events") == [(0,)]
    assert expire_tombstones(rt.sessions, datetime.now(UTC) + timedelta(days=1)) == 1
    assert post(pg_app, "evt_1") == 200
    assert rows(pg_app, "SELECT event_id FROM events") == [("evt_1",)]


def test_a_scheme_with_replay_keys_always_asks_the_database(pg_url: str, redis_url: str, pg_admin_url: str) -> None:
    """A delivery with a replay key that stores nothing may be a replayed signature: only the
    database can tell (and count it under ``replayed_signature``)."""
    app = make_app(base_config(pg_url, REDIS_URL=redis_url, ENDPOINTS=all_endpoints()))
    body, headers, path = genuine(app, "github")
    client = app.test_client()
    assert client.post(path, data=body, headers=headers).status_code == 200
    with database_refused(app, pg_admin_url):
        assert client.post(path, data=body, headers=headers).status_code == 503


def test_the_cache_keeps_at_most_max_keys_the_oldest_dropped() -> None:
    recent = Recent(max_keys=3, ttl=60, clock=lambda: 0.0)
    recent.add([("a", "1"), ("a", "2"), ("a", "3")])
    recent.add([("a", "1")])  # confirmed again: now the newest
    recent.add([("a", "4")])
    assert len(recent) == 3
    assert not recent.holds([("a", "2")])
    assert all(recent.holds([("a", k)]) for k in ("1", "3", "4"))
    assert not recent.holds([("a", "1"), ("a", "5")])  # every key, or none
    assert not recent.holds([])


def test_a_batch_body_is_remembered_by_all_its_events(pg_url: str, redis_url: str, pg_admin_url: str) -> None:
    """A multi-event delivery whose every event is known needs no database either."""
    app = make_app(base_config(pg_url, REDIS_URL=redis_url, ENDPOINTS=all_endpoints()))
    body, headers, path = genuine(app, "gocardless")
    assert len(json.loads(body)["events"]) > 1
    client = app.test_client()
    assert client.post(path, data=body, headers=headers).status_code == 200
    with database_refused(app, pg_admin_url):
        assert client.post(path, data=body, headers=headers).status_code == 200


def test_one_flush_counts_each_stored_event_and_no_other(any_app: Flask) -> None:
    """One statement on PostgreSQL, one per key elsewhere: the same counts, none for an id not stored."""
    for event_id in ("evt_a", "evt_b"):
        assert post(any_app, event_id) == 200
    for event_id in ("evt_a", "evt_b", "evt_a"):
        assert post(any_app, event_id) == 200
    duplicates = batch.committer(runtime(any_app)).duplicates
    duplicates.add({("stripe", "evt_never_stored"): 1})
    duplicates.flush()
    duplicates.add({("stripe", "evt_b"): 2})
    duplicates.flush()
    assert rows(any_app, "SELECT event_id, count FROM duplicates ORDER BY event_id") == [("evt_a", 2), ("evt_b", 3)]
