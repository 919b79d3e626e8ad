"""The PostgreSQL adapter's hand-built path rests on two behaviours no public contract promises
(``webhooks.store.postgres``'s docstring): each is pinned here, so a psycopg or SQLAlchemy release
that changes one fails a test instead of losing events."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask

from tests import sample_handlers
from tests.conftest import base_config, make_app, rows, runtime, stripe_event
from tests.worker.test_processing import deliver_stripe
from webhooks.jobs.process import process_event
from webhooks.store import pgwire


@pytest.fixture
def pg_app(pg_url: str, redis_url: str) -> Flask:
    return make_app(base_config(pg_url, REDIS_URL=redis_url))


def _prepares(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    prepares: list[int] = []
    prepare = pgwire.Wire._prepare
    monkeypatch.setattr(pgwire.Wire, "_prepare", lambda self: (prepares.append(1), prepare(self))[1])
    return prepares


def _event(app: Flask, n: int) -> str:
    deliver_stripe(app, stripe_event(f"evt_f{n}", obj={"id": f"pi_f{n}", "object": "payment_intent"}))
    return f"evt_f{n}"


@pytest.mark.parametrize("reset", ["ROLLBACK", "DEALLOCATE ALL", "DISCARD ALL"])
def test_statements_dropped_on_the_kept_connection_are_prepared_again(
    pg_app: Flask, reset: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ROLLBACK must keep the statements (psycopg's auto-prepare is off: with it on, psycopg
    sends ``DEALLOCATE ALL``); ``DEALLOCATE ALL`` / ``DISCARD ALL`` drop them, and the next
    event prepares them again and is processed."""
    rt = runtime(pg_app)
    with rt.store.keep():
        assert process_event("stripe", _event(pg_app, 1)) == "processed"
        kept = pgwire._kept.get()
        assert kept is not None and kept.connection is not None
        prepares = _prepares(monkeypatch)
        if reset == "ROLLBACK":  # psycopg's own: with auto-prepare on, it would DEALLOCATE ALL
            driver: Any = kept.connection.connection.driver_connection
            driver.execute("BEGIN")
            for _ in range(6):  # more than psycopg's default threshold (5) of a prepared query
                driver.execute("SELECT %s::int", (1,))
            driver.rollback()
        else:
            kept.connection.exec_driver_sql(reset)
        assert process_event("stripe", _event(pg_app, 2)) == "processed"
    assert prepares == ([] if reset == "ROLLBACK" else [1])


def test_the_pools_reset_keeps_the_statements(pg_app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside a worker's loop each event takes a pooled connection, which the pool resets (a
    rollback) on return: the statements survive it, prepared once per connection."""
    rt = runtime(pg_app)
    event_ids = _event(pg_app, 1), _event(pg_app, 2)  # the receiver keeps a connection of its own
    out = rt.engine.pool.checkedout()  # type: ignore[attr-defined]
    assert process_event("stripe", event_ids[0]) == "processed"
    assert rt.engine.pool.checkedout() == out  # type: ignore[attr-defined]  # back in the pool, reset
    prepares = _prepares(monkeypatch)
    assert process_event("stripe", event_ids[1]) == "processed"
    assert prepares == []


def test_a_handlers_session_write_commits_with_the_mark(pg_app: Flask) -> None:
    """The handlers' Session, bound inside the transaction a raw ``BEGIN`` opened, flushes into it:
    its row commits with the mark's ``COMMIT``."""
    runtime(pg_app)
    assert process_event("stripe", _event(pg_app, 1)) == "processed"
    assert rows(pg_app, "SELECT event_id FROM test_handler_calls") == [("evt_f1",)]
    assert rows(
        pg_app,
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction' AND datname = current_database()",
    ) == [(0,)]


def test_a_handlers_session_write_rolls_back_with_an_error(pg_app: Flask) -> None:
    """A handler wrote, then another raised: the write, the object's state and the mark all roll
    back (only the failure's record remains)."""
    runtime(pg_app)
    sample_handlers.FAIL_TYPES.add("charge.refunded")
    deliver_stripe(pg_app, stripe_event("evt_err", "charge.refunded", obj={"id": "ch_1", "object": "charge"}))
    with pytest.raises(RuntimeError):
        process_event("stripe", "evt_err")
    assert rows(pg_app, "SELECT count(*) FROM test_handler_calls") == [(0,)]
    assert rows(pg_app, "SELECT count(*) FROM objects") == [(0,)]
    assert rows(pg_app, "SELECT status, attempts FROM events") == [("failed", 1)]


def test_a_handlers_session_write_rolls_back_with_a_superseded_claim(
    pg_app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim is superseded between the claim and the lock (a replay's claim): the lock step
    sees it, no handler runs, nothing is written, and the transaction ends."""
    rt = runtime(pg_app)
    event_id = _event(pg_app, 1)
    send = pgwire.Wire.send

    def supersede_first(self: pgwire.Wire, *steps: Any, **params: Any) -> Any:
        if any(getattr(s, "name", "") == "webhooks_lock_row" for s in steps):
            with rt.engine.begin() as conn:  # the other claim, committed before our lock
                conn.execute(sa.text("UPDATE events SET attempts = attempts + 1 WHERE event_id = :e"), {"e": event_id})
            monkeypatch.setattr(pgwire.Wire, "send", send)
        return send(self, *steps, **params)

    monkeypatch.setattr(pgwire.Wire, "send", supersede_first)
    assert process_event("stripe", event_id) == "skipped"
    assert rows(pg_app, "SELECT count(*) FROM test_handler_calls") == [(0,)]
    assert rows(pg_app, "SELECT count(*) FROM objects") == [(0,)]
    assert rows(pg_app, "SELECT status, attempts FROM events") == [("processing", 2)]
    assert rows(
        pg_app,
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction' AND datname = current_database()",
    ) == [(0,)]
