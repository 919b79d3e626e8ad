"""The embedded default (SQLite, in-process worker): a slow handler never stalls deliveries or
console reads, and exactly-once holds (claim token, busy fallback, the sweeper leaves a live job).

The handlers below block on a ``threading.Event`` the test releases; nothing here orders events
with sleeps: each step polls with a deadline.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask

from tests import sample_handlers
from tests.conftest import admin_headers, base_config, make_app, rows, runtime, stripe_event, stripe_headers, wait_until
from webhooks import HandlerEvent, on
from webhooks.worker.sweeper import sweep

PROMPT = 10.0  # seconds: a delivery or a read that waits for the handler takes 30 s (busy timeout)
STARTED = threading.Event()
RELEASE = threading.Event()
RUNS: list[str] = []


@on("stripe", "test.blocking")
def blocking(event: HandlerEvent) -> None:
    """Waits for the test, then writes through the processing transaction."""
    RUNS.append(event.event_id)
    STARTED.set()
    RELEASE.wait(60)
    event.session.execute(
        sample_handlers.calls.insert().values(
            endpoint=event.endpoint, event_id=event.event_id, idempotency_key="blocking"
        )
    )


@on("stripe", "test.read_then_write")
def read_then_write(event: HandlerEvent) -> None:
    """Reads (a snapshot), waits while others commit, then writes: SQLite refuses that write."""
    RUNS.append(event.event_id)
    event.session.execute(sa.select(sample_handlers.calls)).all()
    STARTED.set()
    RELEASE.wait(60)
    event.session.execute(
        sample_handlers.calls.insert().values(
            endpoint=event.endpoint, event_id=event.event_id, idempotency_key="read_then_write"
        )
    )


@pytest.fixture
def embedded(sqlite_url: str) -> Iterator[Flask]:
    """``webhooks serve``'s setup: SQLite and the embedded worker thread, running these handlers."""
    STARTED.clear()
    RELEASE.clear()
    RUNS.clear()
    app = make_app(
        base_config(
            sqlite_url, WEBHOOKS_EMBEDDED_WORKER="true", WEBHOOKS_HANDLERS="tests.worker.test_embedded_concurrency"
        )
    )
    yield app
    RELEASE.set()  # never leave the worker thread waiting


def deliver(app: Flask, event_id: str, type_: str = "test.blocking") -> int:
    body = stripe_event(event_id, type_, obj={"id": f"obj_{event_id}", "object": "thing"})
    return app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code


def promptly(action: Callable[[], Any]) -> Any:
    """``action``'s result, run on a thread, if it completes within ``PROMPT`` seconds; else the
    handler is released (so the worker finishes) and the test fails."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(action()), daemon=True)
    thread.start()
    thread.join(PROMPT)
    if not result:
        RELEASE.set()
        thread.join(60)
        pytest.fail(f"waited more than {PROMPT} s for a handler (result after release: {result})")
    return result[0]


def event(app: Flask, event_id: str) -> dict[str, Any]:
    response = app.test_client().get(f"/admin/api/events/stripe/{event_id}", headers=admin_headers())
    assert response.status_code == 200, response.data
    return response.get_json()  # type: ignore[no-any-return]


def handler_rows(app: Flask, event_id: str) -> list[str]:
    found = rows(app, "SELECT idempotency_key FROM test_handler_calls WHERE event_id = :e", e=event_id)
    return [key for (key,) in found]


def processed(app: Flask, event_id: str) -> dict[str, Any] | None:
    found = event(app, event_id)
    return found if found["status"] == "processed" else None


def test_a_blocked_handler_stalls_no_delivery_and_no_console_read(embedded: Flask) -> None:
    assert deliver(embedded, "evt_slow") == 200
    wait_until(STARTED.is_set)
    # While the handler holds its event: a new delivery is stored, the console reads both.
    assert promptly(lambda: deliver(embedded, "evt_next", "test.other")) == 200
    assert promptly(lambda: event(embedded, "evt_slow"))["status"] == "processing"
    assert promptly(lambda: event(embedded, "evt_next"))["status"] in ("queued", "received")
    listing = promptly(lambda: embedded.test_client().get("/admin/api/events", headers=admin_headers()))
    assert listing.status_code == 200
    assert handler_rows(embedded, "evt_slow") == []  # its write is not committed before the mark
    RELEASE.set()
    slow = wait_until(lambda: processed(embedded, "evt_slow"))
    wait_until(lambda: processed(embedded, "evt_next"))
    assert slow["attempts"] == 1
    assert handler_rows(embedded, "evt_slow") == ["blocking"]
    assert RUNS == ["evt_slow"]
    state = embedded.test_client().get("/admin/api/objects/stripe/thing/obj_evt_slow", headers=admin_headers())
    assert state.get_json()["last_event_id"] == "evt_slow"


def test_a_superseded_claim_rolls_back_the_handlers_writes(embedded: Flask) -> None:
    assert deliver(embedded, "evt_raced") == 200
    wait_until(STARTED.is_set)
    # Another job of the same event claims it meanwhile (a replay, a sweeper's recovery): its
    # attempt is the token now, so the first run must leave nothing behind but its attempt's row
    # (every attempt that ran leaves one: here, a stale claim's).
    with runtime(embedded).engine.begin() as conn:
        conn.execute(sa.text("UPDATE events SET attempts = attempts + 1 WHERE event_id = 'evt_raced'"))
    RELEASE.set()
    wait_until(
        lambda: (
            rows(embedded, "SELECT number, status, substr(error, 1, 15) FROM attempts")
            == [(1, "error", "StaleClaimError")]
            and RUNS == ["evt_raced"]
            and not runtime(embedded).queue.live([("stripe", "evt_raced")])[0]
        )
    )
    found = event(embedded, "evt_raced")
    assert (found["status"], found["attempts"]) == ("processing", 2)
    assert handler_rows(embedded, "evt_raced") == []


def test_a_handler_that_reads_then_writes_after_a_commit_runs_again_inside_the_lock(embedded: Flask) -> None:
    assert deliver(embedded, "evt_rw", "test.read_then_write") == 200
    wait_until(STARTED.is_set)
    assert promptly(lambda: deliver(embedded, "evt_between", "test.other")) == 200  # commits meanwhile
    RELEASE.set()
    found = wait_until(lambda: processed(embedded, "evt_rw"))
    assert found["attempts"] == 1  # the busy write was not a failed attempt
    assert RUNS == ["evt_rw", "evt_rw"]  # run again, under the write lock
    assert handler_rows(embedded, "evt_rw") == ["read_then_write"]  # once: the first run rolled back


def test_the_sweeper_leaves_a_running_job_alone(embedded: Flask) -> None:
    from datetime import UTC, datetime, timedelta

    assert deliver(embedded, "evt_long") == 200
    wait_until(STARTED.is_set)
    rt = runtime(embedded)
    # Long after its claim, by the sweeper's clock: the row is `processing`, but its job is live.
    assert sweep(rt, now=datetime.now(UTC) + timedelta(hours=1), age=0) == 0
    found = event(embedded, "evt_long")
    assert (found["status"], found["attempts"]) == ("processing", 1)
    RELEASE.set()
    wait_until(lambda: processed(embedded, "evt_long"))
    assert handler_rows(embedded, "evt_long") == ["blocking"]
    assert RUNS == ["evt_long"]
