"""A destination's ``rate_limit`` and ``max_in_flight`` hold whatever is due."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from tests.conftest import drain, runtime, stripe_event, stripe_headers
from tests.forward.test_forwarding import forwarding_app
from tests.support import destination
from webhooks.forward.dispatcher import Forwarder
from webhooks.forward.dispatcher import drain as drain_forwarder


@pytest.fixture
def service() -> Iterator[destination.Destination]:
    with destination.running() as dest:
        yield dest


def _store(app: object, count: int) -> None:
    client = app.test_client()  # type: ignore[attr-defined]
    for n in range(count):
        body = stripe_event(f"evt_lim_{n}", obj={"id": f"pi_{n}", "object": "payment_intent"})
        assert client.post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200
    drain(app)  # type: ignore[arg-type]


def test_max_in_flight_bounds_concurrent_requests(
    request: pytest.FixtureRequest, service: destination.Destination
) -> None:
    in_flight, most = 0, 0
    lock = threading.Lock()
    release = threading.Event()

    def answer(n: int, seen: destination.Seen) -> destination.Answer:
        nonlocal in_flight, most
        with lock:
            in_flight += 1
            most = max(most, in_flight)
        release.wait(0.1)  # long enough for the forwarder to try to send more
        with lock:
            in_flight -= 1
        return 200, {}, b"ok"

    service.answer = answer
    app = forwarding_app(
        request, "sqlite", {"orders": destination.config(service, max_in_flight=3)}, forward=["orders"]
    )
    _store(app, 12)
    rt = runtime(app)
    forwarder = Forwarder(rt.sessions, rt.settings.destinations)
    try:
        drain_forwarder(forwarder, timeout=60)
    finally:
        forwarder.stop()
    assert len(service.verified()) == 12
    assert most == 3  # never more, and the room was used


def test_rate_limit_spaces_requests(request: pytest.FixtureRequest, service: destination.Destination) -> None:
    app = forwarding_app(request, "sqlite", {"orders": destination.config(service, rate_limit=5)}, forward=["orders"])
    _store(app, 15)
    rt = runtime(app)
    forwarder = Forwarder(rt.sessions, rt.settings.destinations)
    started = time.monotonic()
    try:
        drain_forwarder(forwarder, timeout=60)
    finally:
        forwarder.stop()
    elapsed = time.monotonic() - started
    assert len(service.verified()) == 15
    # A burst of 5, then 5 a second: the other 10 need 2 s at least (a slow machine only adds).
    assert elapsed >= 1.8
