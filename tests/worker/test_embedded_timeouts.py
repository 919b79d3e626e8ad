"""The embedded default (SQLite, a worker thread): a handler stuck in a blocking call past
``WEBHOOKS_JOB_TIMEOUT`` stalls no other event. The watchdog records the attempt as timed out (RQ's
retry policy applies), takes back the processing lock and starts a fresh worker thread; the stuck
thread's late finish changes nothing.

The blocking handler waits on a ``threading.Event`` the test releases at the end (a blocking C
call: RQ's timer cannot interrupt it); each step polls with a deadline.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask

from tests import sample_handlers
from tests.conftest import admin_headers, base_config, make_app, rows, stripe_event, stripe_headers, wait_until
from webhooks import HandlerEvent, on

# Real job timeouts: RQ's timer and the watchdog wait seconds no injected clock stands in for.
pytestmark = pytest.mark.slow
TIMEOUT = 2  # seconds: WEBHOOKS_JOB_TIMEOUT
# Well below the handler's block (60 s) and what the old code took (until the block ended), with
# room for a machine twice as slow: the timeout, the watchdog's check, a retry's second run.
DEADLINE = 20.0
STARTED = threading.Event()
RELEASE = threading.Event()
LATE = threading.Event()  # the stuck call returned


@on("stripe", "test.stuck")
def stuck(event: HandlerEvent) -> None:
    """The first attempt blocks (a socket without timeout, a sleep); a retry returns at once."""
    if event.attempt == 1:
        STARTED.set()
        try:
            RELEASE.wait(60)
        finally:  # RQ's timer raises its timeout here once the wait returns
            LATE.set()
    event.session.execute(
        sample_handlers.calls.insert().values(
            endpoint=event.endpoint, event_id=event.event_id, idempotency_key=f"stuck-{event.attempt}"
        )
    )


@pytest.fixture
def embedded(sqlite_url: str, request: pytest.FixtureRequest) -> Iterator[Flask]:
    """``webhooks serve``'s setup with a short job timeout, running these handlers."""
    for flag in (STARTED, RELEASE, LATE):
        flag.clear()
    attempts = getattr(request, "param", 2)
    app = make_app(
        base_config(
            sqlite_url,
            WEBHOOKS_EMBEDDED_WORKER="true",
            WEBHOOKS_JOB_TIMEOUT=str(TIMEOUT),
            WEBHOOKS_MAX_ATTEMPTS=str(attempts),
            WEBHOOKS_HANDLERS="tests.worker.test_embedded_timeouts",
        )
    )
    yield app
    RELEASE.set()  # never leave the stuck thread waiting
    wait_until(lambda: not abandoned())


def deliver(app: Flask, event_id: str, type_: str) -> None:
    body = stripe_event(event_id, type_, obj={"id": f"obj_{event_id}", "object": "thing"})
    assert app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200


def event(app: Flask, event_id: str) -> dict[str, Any]:
    response = app.test_client().get(f"/admin/api/events/stripe/{event_id}", headers=admin_headers())
    assert response.status_code == 200, response.data
    return response.get_json()  # type: ignore[no-any-return]


def status(app: Flask, event_id: str, *wanted: str) -> dict[str, Any] | None:
    found = event(app, event_id)
    return found if found["status"] in wanted else None


def handler_rows(app: Flask, event_id: str) -> list[str]:
    found = rows(app, "SELECT idempotency_key FROM test_handler_calls WHERE event_id = :e ORDER BY id", e=event_id)
    return [key for (key,) in found]


def history(app: Flask, event_id: str) -> list[tuple[int, str]]:
    found = rows(app, "SELECT number, status FROM attempts WHERE event_id = :e ORDER BY number, id", e=event_id)
    return [(number, outcome) for number, outcome in found]


def abandoned() -> list[threading.Thread]:
    """Worker threads the watchdog gave up on that have not ended yet."""
    return [t for t in threading.enumerate() if t.name == "webhooks-worker-abandoned"]


def test_a_stuck_handler_does_not_stall_the_next_event(embedded: Flask) -> None:
    deliver(embedded, "evt_stuck", "test.stuck")
    wait_until(STARTED.is_set)
    deliver(embedded, "evt_next", "payment_intent.succeeded")  # another object
    wait_until(lambda: status(embedded, "evt_next", "processed"), timeout=DEADLINE)
    assert not LATE.is_set()  # processed while the first is still blocked
    # The stuck attempt was recorded as timed out and retried under RQ's policy: the retry ran.
    found = wait_until(lambda: status(embedded, "evt_stuck", "processed"), timeout=DEADLINE)
    assert found["attempts"] == 2
    assert history(embedded, "evt_stuck") == [(1, "error"), (2, "processed")]
    assert handler_rows(embedded, "evt_stuck") == ["stuck-2"]
    # The stuck call returns at last: its late finish applies nothing, overwrites nothing.
    RELEASE.set()
    wait_until(lambda: LATE.is_set() and not abandoned())  # its thread ended its job and its loop
    found = event(embedded, "evt_stuck")
    assert (found["status"], found["attempts"]) == ("processed", 2)
    assert history(embedded, "evt_stuck") == [(1, "error"), (2, "processed")]
    assert handler_rows(embedded, "evt_stuck") == ["stuck-2"]


@pytest.mark.parametrize("embedded", [1], indirect=True)  # WEBHOOKS_MAX_ATTEMPTS=1: no retry
def test_a_stuck_last_attempt_ends_failed_with_its_stack(embedded: Flask) -> None:
    deliver(embedded, "evt_stuck", "test.stuck")
    wait_until(STARTED.is_set)
    found = wait_until(lambda: status(embedded, "evt_stuck", "failed"), timeout=DEADLINE)
    assert not LATE.is_set()  # failed, not left `processing`, while its call is still blocked
    assert found["attempts"] == 1
    assert "JobTimeoutException" in found["last_error"] and f"({TIMEOUT} seconds)" in found["last_error"]
    detail = embedded.test_client().get("/admin/api/events/stripe/evt_stuck", headers=admin_headers()).get_json()
    assert "RELEASE.wait(60)" in str(detail)  # where it was stuck: the abandoned thread's stack
    deliver(embedded, "evt_next", "payment_intent.succeeded")  # the fresh worker thread takes it
    wait_until(lambda: status(embedded, "evt_next", "processed"), timeout=DEADLINE)
    RELEASE.set()
    wait_until(lambda: LATE.is_set() and not abandoned())
    found = event(embedded, "evt_stuck")
    assert (found["status"], found["attempts"]) == ("failed", 1)
    assert history(embedded, "evt_stuck") == [(1, "error")]
    assert handler_rows(embedded, "evt_stuck") == []
