"""Retention: ``webhooks purge`` refuses a window inside a retry horizon, deletes in batches, keeps
failed and unfinished events, and dedup still holds for what it keeps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner
from flask import Flask

from tests.conftest import drain, rows, runtime, stripe_event, stripe_headers
from webhooks.service.cli import main
from webhooks.store.purge import Plan, PurgeRefusedError, horizon, parse_age, purge

DAY = timedelta(days=1)


def deliver(app: Flask, event_id: str) -> int:
    body = stripe_event(event_id)
    return app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code


def age(app: Flask, days: float, where: str = "1 = 1") -> None:
    with runtime(app).engine.begin() as conn:
        conn.exec_driver_sql(
            f"UPDATE events SET received_at = ? WHERE {where}", (datetime.now(UTC) - timedelta(days=days),)
        )


def test_durations_and_horizons() -> None:
    assert (
        parse_age("30d") == 30 * DAY
        and parse_age("12h") == timedelta(hours=12)
        and parse_age("90") == timedelta(seconds=90)
    )
    assert horizon({"stripe", "slack"}) == (3 * DAY, "stripe")
    assert horizon({"adyen", "stripe"}) == (30 * DAY, "adyen")
    assert horizon({"hmac"}) == (30 * DAY, "hmac")  # unknown retry behaviour: assume the longest
    assert horizon({"github"}) == (timedelta(0), None)


def test_refuses_a_window_inside_the_retry_horizon(app: Flask) -> None:
    rt = runtime(app)
    with pytest.raises(PurgeRefusedError, match="adyen"):  # adyen is configured: 30 days
        purge(rt.sessions, Plan(7 * DAY, 14 * DAY), kinds={"stripe", "adyen"})
    with pytest.raises(PurgeRefusedError):  # the kinds still in the table count too
        deliver(app, "evt_kept")
        purge(rt.sessions, Plan(DAY, 2 * DAY), kinds=set())
    assert purge(rt.sessions, Plan(DAY, 2 * DAY), kinds={"stripe"}, force=True) == 0


def test_purges_in_batches_keeps_failed_and_unfinished_and_dedup_holds(app: Flask) -> None:
    for n in range(25):
        assert deliver(app, f"evt_old_{n}") == 200
    drain(app)
    age(app, 40)
    for event_id in ("evt_failed", "evt_unfinished", "evt_recent"):
        deliver(app, event_id)
    drain(app)
    with runtime(app).engine.begin() as conn:
        conn.exec_driver_sql("UPDATE events SET status = 'failed' WHERE event_id = 'evt_failed'")
        conn.exec_driver_sql("UPDATE events SET status = 'queued' WHERE event_id = 'evt_unfinished'")
    age(app, 40, "event_id IN ('evt_failed', 'evt_unfinished')")
    batches: list[int] = []
    deleted = purge(
        runtime(app).sessions,
        Plan(30 * DAY, 60 * DAY, batch_size=10),
        kinds={"stripe", "adyen"},
        progress=batches.append,
    )
    assert (deleted, batches) == (25, [10, 10, 5])
    assert sorted(r[0] for r in rows(app, "SELECT event_id FROM events")) == [
        "evt_failed",
        "evt_recent",
        "evt_unfinished",
    ]
    # A purged event's processing attempts go with it (the attempts table would otherwise grow for ever).
    assert rows(app, "SELECT count(*) FROM attempts WHERE event_id LIKE 'evt_old_%'") == [(0,)]
    assert rows(app, "SELECT count(*) FROM attempts WHERE event_id = 'evt_recent'") == [(1,)]
    # Inside the window, dedup holds: a retry of a kept event is a duplicate, no second effect.
    calls = len(rows(app, "SELECT 1 FROM test_handler_calls"))
    assert deliver(app, "evt_recent") == 200
    drain(app)
    assert len(rows(app, "SELECT 1 FROM events WHERE event_id = 'evt_recent'")) == 1
    assert len(rows(app, "SELECT 1 FROM test_handler_calls")) == calls


def test_cli(app: Flask, sqlite_url: str) -> None:
    deliver(app, "evt_cli")
    drain(app)
    age(app, 100)
    env = {"DATABASE_URL": sqlite_url, "STRIPE_WEBHOOK_SECRET": "whsec_x"}
    refused = CliRunner().invoke(main, ["purge", "--older-than", "1d"], env=env)
    assert refused.exit_code != 0 and "retry horizon" in refused.output
    done = CliRunner().invoke(main, ["purge", "--older-than", "30d"], env=env)
    assert done.exit_code == 0, done.output
    assert "deleted 1 events" in done.output
    assert rows(app, "SELECT 1 FROM events") == []


def test_each_batch_is_followed_by_a_pause_in_proportion_to_its_own_time(app: Flask) -> None:
    """``yield_ratio``: after every batch the purge sleeps that multiple of the batch's time, so
    ingest gets the database back in between; 0 never pauses."""
    for n in range(7):
        deliver(app, f"evt_pause_{n}")
    drain(app)
    age(app, 40)
    pauses: list[float] = []
    deleted = purge(
        runtime(app).sessions,
        Plan(30 * DAY, 60 * DAY, batch_size=3, yield_ratio=50.0),
        kinds={"stripe", "adyen"},
        pause=pauses.append,
    )
    assert deleted == 7
    batches = [p for p in pauses if p > 0]
    assert len(batches) >= 3 and all(p >= 50 * 1e-6 for p in batches), pauses  # 3 + 3 + 1 rows, each timed
    quiet: list[float] = []
    deliver(app, "evt_pause_late")
    drain(app)
    age(app, 40, "event_id = 'evt_pause_late'")
    assert (
        purge(runtime(app).sessions, Plan(30 * DAY, 60 * DAY, yield_ratio=0), kinds={"stripe"}, pause=quiet.append) == 1
    )
    assert quiet and set(quiet) == {0.0}
    assert deliver(app, "evt_pause_late") == 200  # re-delivered after purge: a duplicate, not stored again
    drain(app)
    assert rows(app, "SELECT 1 FROM events WHERE event_id = 'evt_pause_late'") == []
