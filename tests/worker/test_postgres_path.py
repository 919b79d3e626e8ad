"""Processing on PostgreSQL (``webhooks.store.postgres_worker``): the steps' round trips, a superseded claim, the
plan of the row lookups, and the pool's ping of rested connections."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from tests import sample_handlers
from tests.conftest import base_config, drain, make_app, rows, runtime, stripe_event
from tests.worker.test_processing import deliver_stripe
from webhooks import engines as db
from webhooks.jobs.process import work
from webhooks.store import pgwire
from webhooks.store import postgres_worker as postgres


def count_messages(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """Each message sent by processing, as the names of its steps."""
    sent: list[tuple[str, ...]] = []
    send = pgwire.Wire.send

    def spy(self: pgwire.Wire, *steps: pgwire.Step, **params: Any) -> Any:
        sent.append(tuple(s.name if isinstance(s, pgwire.Statement) else s for s in steps))
        return send(self, *steps, **params)

    monkeypatch.setattr(pgwire.Wire, "send", spy)
    return sent


@pytest.mark.parametrize("handlers", ["tests.sample_handlers", ""])
def test_an_event_takes_three_messages_with_handlers_and_two_without(
    pg_url: str, redis_url: str, handlers: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(base_config(pg_url, REDIS_URL=redis_url, WEBHOOKS_HANDLERS=handlers))
    deliver_stripe(app, stripe_event("evt_trips"))
    sent = count_messages(monkeypatch)
    drain(app)
    claim = ("BEGIN", postgres.ASYNC_COMMIT, "webhooks_claim", "COMMIT")
    lock = ("BEGIN", "webhooks_lock_row", "webhooks_lock_object", "webhooks_upsert")
    mark = ("webhooks_mark", "COMMIT")
    assert sent == ([claim, lock, mark] if handlers else [claim, lock + mark])
    assert rows(app, "SELECT status, attempts, object_id FROM events") == [("processed", 1, "pi_1")]
    assert rows(app, "SELECT number, status FROM attempts") == [(1, "processed")]
    assert rows(app, "SELECT object_id, version > 0 FROM objects") == [("pi_1", True)]
    assert len(rows(app, "SELECT 1 FROM test_handler_calls")) == (1 if handlers else 0)


@pytest.mark.parametrize("handlers", ["tests.sample_handlers", ""])
def test_a_superseded_claim_applies_marks_and_runs_nothing(pg_url: str, redis_url: str, handlers: str) -> None:
    """Job A claimed attempt 1; before it locked the row, the sweeper gave the event to job B,
    whose claim (attempt 2) is the one that counts. A's steps then change nothing: no state, no
    mark, no attempt row, no handler (with handlers, and in the one message without)."""
    app = make_app(base_config(pg_url, REDIS_URL=redis_url, WEBHOOKS_HANDLERS=handlers))
    deliver_stripe(app, stripe_event("evt_sup"))
    rt = runtime(app)
    with rt.scope(), pgwire.wire(rt.engine) as wire:
        claimed = postgres.claim(wire, "stripe", "evt_sup", datetime.now(UTC), datetime.now(UTC) + timedelta(minutes=6))
        assert claimed is not None and claimed.attempts == 1
        with rt.engine.begin() as conn:  # job B's claim
            conn.execute(sa.text("UPDATE events SET attempts = 2 WHERE event_id = 'evt_sup'"))
        assert postgres.process(rt.sessions, wire, claimed, work(rt, claimed), datetime.now(UTC)) == "skipped"
        assert wire.end()
    assert rows(app, "SELECT status, attempts FROM events") == [("processing", 2)]
    assert rows(app, "SELECT count(*) FROM objects") == [(0,)]
    assert rows(app, "SELECT count(*) FROM attempts") == [(0,)]
    assert rows(app, "SELECT count(*) FROM test_handler_calls") == [(0,)]


def test_a_failing_handler_leaves_no_transaction_open(pg_url: str, redis_url: str) -> None:
    """The handler raises before writing anything: the lock step's transaction (and its row
    lock) still ends, so the failure is recorded at once, not after a lock wait."""
    app = make_app(base_config(pg_url, REDIS_URL=redis_url, WEBHOOKS_MAX_ATTEMPTS="1"))
    sample_handlers.FAIL_TYPES.add("charge.refunded")
    try:
        deliver_stripe(app, stripe_event("evt_raise", "charge.refunded", obj={"id": "ch_9", "object": "charge"}))
        drain(app)
    finally:
        sample_handlers.FAIL_TYPES.clear()
    assert rows(app, "SELECT status, attempts FROM events") == [("failed", 1)]
    assert rows(app, "SELECT status FROM attempts") == [("error",)]
    assert rows(app, "SELECT count(*) FROM objects") == [(0,)]  # the state rolled back with the attempt
    assert rows(
        app,
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction' AND datname = current_database()",
    ) == [(0,)]


def test_row_lookups_use_the_primary_key_before_any_statistics(pg_url: str) -> None:
    """0008: a new table has no statistics; with a full ``(endpoint, replay_key)`` index the
    planner read ``endpoint = … AND event_id = …`` through it, every row of the endpoint."""
    make_app(base_config(pg_url))
    engine = sa.create_engine(pg_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO events (endpoint, event_id, kind, event_type, status, attempts, received_at,"
                    " status_at, payload, headers, scheme) SELECT 'stripe', 'evt_' || i, 'stripe', 't', 'queued', 0,"
                    " now(), now(), '', '{}', 'stripe' FROM generate_series(1, 300) i"
                )
            )
            plan = "\n".join(
                r[0]
                for r in conn.execute(
                    sa.text("EXPLAIN SELECT 1 FROM events WHERE endpoint = 'stripe' AND event_id = 'evt_7' FOR UPDATE")
                )
            )
            indexes = dict(
                conn.execute(sa.text("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'events'")).all()
            )
    finally:
        engine.dispose()
    assert "pk_events" in plan, plan
    assert indexes["ux_events_replay_key"].endswith("WHERE (replay_key IS NOT NULL)")
    assert indexes["ix_events_reference"].endswith("WHERE (reference IS NOT NULL)")


def test_a_rested_connection_is_pinged_a_fresh_one_is_not(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool pings a connection that rested longer than ``PING_IDLE`` (a dead one is replaced,
    never handed out) and hands out one used a moment ago without a round trip."""
    engine = db.make_engine(pg_url)
    pings: list[int] = []
    ping = engine.dialect.do_ping

    def counted(dbapi_connection: Any) -> bool:
        pings.append(1)
        return ping(dbapi_connection)

    monkeypatch.setattr(engine.dialect, "do_ping", counted)
    admin = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            pid = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar()
        with engine.connect() as conn:  # just checked in: no ping
            assert conn.execute(sa.text("SELECT pg_backend_pid()")).scalar() == pid
        assert pings == []
        with admin.connect() as other:
            assert other.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar()
        monkeypatch.setattr(db, "PING_IDLE", 0.0)  # as if it had rested
        with engine.connect() as conn:  # the ping finds it dead: a new connection, no error
            assert conn.execute(sa.text("SELECT pg_backend_pid()")).scalar() != pid
        assert pings == [1]
    finally:
        admin.dispose()
        engine.dispose()


def test_statements_deallocated_under_the_worker_are_prepared_again(
    pg_url: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Something ran ``DEALLOCATE ALL`` on the worker's pooled connection (psycopg itself does on
    a ROLLBACK once it has prepared statements of its own): the next event still processes."""
    app = make_app(base_config(pg_url, REDIS_URL=redis_url))
    rt = runtime(app)
    deliver_stripe(app, stripe_event("evt_before"))
    drain(app)
    with rt.engine.connect() as conn:  # the pool's one idle connection: the worker's
        prepared = conn.execute(sa.text("SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'webhooks_%'"))
        assert prepared.scalar() == len(pgwire.STATEMENTS)
        conn.execute(sa.text("DEALLOCATE ALL"))
        conn.commit()
    deliver_stripe(app, stripe_event("evt_after", obj={"id": "pi_2", "object": "payment_intent"}))
    prepares: list[int] = []
    prepare = pgwire.Wire._prepare
    monkeypatch.setattr(pgwire.Wire, "_prepare", lambda self: (prepares.append(1), prepare(self))[1])
    drain(app)
    assert prepares == [1]  # the claim failed on the missing statement, and was sent again
    assert rows(app, "SELECT event_id, status, attempts FROM events ORDER BY event_id") == [
        ("evt_after", "processed", 1),
        ("evt_before", "processed", 1),
    ]


def test_a_worker_loop_keeps_one_connection_and_replaces_a_dead_one(
    pg_url: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside ``keep`` (``webhooks worker``'s loop) events share one connection instead of a pool
    check-out each; one found dead after resting is replaced, and it goes back at the end."""
    app = make_app(base_config(pg_url, REDIS_URL=redis_url))
    rt = runtime(app)
    for i in range(3):
        deliver_stripe(app, stripe_event(f"evt_k{i}", obj={"id": f"pi_k{i}", "object": "payment_intent"}))
    pids: list[int] = []
    claim = postgres.claim

    def spy(wire: pgwire.Wire, *args: Any) -> Any:
        pids.append(wire.connection.connection.driver_connection.info.backend_pid)  # type: ignore[union-attr]
        return claim(wire, *args)

    monkeypatch.setattr(postgres, "claim", spy)
    out = rt.engine.pool.checkedout()  # type: ignore[attr-defined]
    admin = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")
    try:
        checkouts: list[int] = []
        sa.event.listen(rt.engine, "checkout", lambda *_: checkouts.append(1))
        with pgwire.keep(rt.engine):
            drain(app)
            assert len(pids) == 3 and len(set(pids)) == 1 and checkouts == [1]  # not one per event
            with admin.connect() as other:
                assert other.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pids[0]}).scalar()
            monkeypatch.setattr(db, "PING_IDLE", 0.0)  # it rested: pinged, found dead, replaced
            deliver_stripe(app, stripe_event("evt_k3", obj={"id": "pi_k3", "object": "payment_intent"}))
            drain(app)
            assert len(pids) == 4 and pids[3] != pids[0]
        assert rt.engine.pool.checkedout() == out  # type: ignore[attr-defined]
    finally:
        admin.dispose()
    assert rows(app, "SELECT count(*) FROM events WHERE status = 'processed' AND attempts = 1") == [(4,)]
