"""``webhooks serve``'s handover: its web processes queue nothing, and its worker process takes the
committed ``queued`` rows from the database onto its own embedded queue (``webhooks.worker.handover``) —
new deliveries, replays, and a row that committed after rows stamped later."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from flask import Flask

from tests.conftest import base_config, drain, make_app, rows, runtime, stripe_event, stripe_headers
from webhooks.admin.replay import replay_one
from webhooks.tables.events import Event
from webhooks.worker.handover import LOOKBACK, LOOKBACK_EVERY, Handover


def web_and_worker(sqlite_url: str) -> tuple[Flask, Flask]:
    """Two runtimes on one SQLite file: a web process's (handed over) and the worker process's."""
    web = make_app(base_config(sqlite_url))
    runtime(web).queue.hand_over()
    return web, make_app(base_config(sqlite_url))


def deliver(web: Flask, *ids: str) -> None:
    client = web.test_client()
    for event_id in ids:
        body = stripe_event(event_id)
        assert client.post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200


def statuses(app: Flask) -> dict[str, str]:
    return {e: s for e, s in rows(app, "SELECT event_id, status FROM events")}


def test_the_worker_process_takes_what_the_web_process_stored_and_queued_nothing_for(sqlite_url: str) -> None:
    web, worker = web_and_worker(sqlite_url)
    handover = Handover(runtime(worker), datetime.now(UTC))
    deliver(web, "evt_a", "evt_b", "evt_c")
    assert runtime(web).queue.queue.count == 0  # the web process's queue is nobody's: nothing in it
    assert statuses(web) == {"evt_a": "queued", "evt_b": "queued", "evt_c": "queued"}
    handover.poll(0.0)
    assert runtime(worker).queue.queue.count == 3
    drain(worker)
    assert set(statuses(worker).values()) == {"processed"}
    handover.poll(0.0)
    handover.poll(LOOKBACK_EVERY)  # a look back too: nothing is queued twice
    assert runtime(worker).queue.queue.count == 0


def test_a_replay_from_the_console_is_queued_afresh_by_the_worker_process(sqlite_url: str) -> None:
    web, worker = web_and_worker(sqlite_url)
    handover = Handover(runtime(worker), datetime.now(UTC))
    deliver(web, "evt_r")
    handover.poll(0.0)
    drain(worker)  # processed; RQ keeps its finished job for a while
    outcome = replay_one(runtime(web), "stripe", "evt_r", who="admin", reason="test")
    assert outcome.queued  # the web side "queued" it: the row says so
    assert statuses(web) == {"evt_r": "queued"}
    handover.poll(0.0)
    assert runtime(worker).queue.queue.count == 1  # the finished job did not hide the replay
    drain(worker)
    assert rows(worker, "SELECT status, attempts FROM events") == [("processed", 2)]


def test_a_row_that_commits_after_a_later_stamp_is_taken_at_the_next_look_back(sqlite_url: str) -> None:
    web, worker = web_and_worker(sqlite_url)
    handover = Handover(runtime(worker), datetime.now(UTC))
    deliver(web, "evt_first")
    handover.poll(0.0)  # a look back; the newest stamp seen is evt_first's
    deliver(web, "evt_late")
    # As if evt_late were stamped before evt_first but committed after that poll.
    late = handover.newest - LOOKBACK / 2
    with runtime(web).engine.begin() as conn:
        conn.execute(sa.update(Event).where(Event.event_id == "evt_late").values(status_at=late))
    handover.poll(0.1)
    assert runtime(worker).queue.queue.count == 1  # evt_first only: evt_late is older than the newest
    handover.poll(LOOKBACK_EVERY)
    assert runtime(worker).queue.queue.count == 2
    drain(worker)
    assert statuses(worker) == {"evt_first": "processed", "evt_late": "processed"}


def test_older_rows_are_the_start_up_sweeps_not_the_handovers(sqlite_url: str) -> None:
    web, worker = web_and_worker(sqlite_url)
    deliver(web, "evt_old")
    handover = Handover(runtime(worker), datetime.now(UTC) + LOOKBACK + timedelta(seconds=1))
    handover.poll(0.0)
    assert runtime(worker).queue.queue.count == 0


def test_a_handed_over_web_process_reports_the_queued_rows_as_the_queue_depth(sqlite_url: str) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from webhooks.service.collector import exposition

    web, worker = web_and_worker(sqlite_url)

    def depth(app: Flask) -> float:
        body, _ = exposition(runtime(app))
        [family] = [f for f in text_string_to_metric_families(body.decode()) if f.name == "webhooks_queue_depth"]
        return family.samples[0].value

    deliver(web, "evt_d1", "evt_d2", "evt_d3")
    # Its own queue holds nothing (the worker process's does): the rows waiting are the depth.
    assert runtime(web).queue.queue.count == 0 and depth(web) == 3
    Handover(runtime(worker), datetime.now(UTC) - LOOKBACK).poll(0.0)
    drain(worker)
    assert depth(web) == 0
