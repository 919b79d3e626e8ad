"""A destination whose name resolves slowly (issue 30): the lookup is bounded by the destination's
timeout and ends inside the delivery's lease, as one failed attempt, never a second send under the
same ``webhook-id``. The resolver is injected: the guard's lookup is the only one there is."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from tests.conftest import drain, rows, runtime, stripe_event
from tests.forward.conftest import forwarding_app, post
from tests.support import destination
from webhooks.forward.dispatcher import Forwarder
from webhooks.forward.dispatcher import drain as drain_forwarder


@pytest.fixture
def service() -> Iterator[destination.Destination]:
    with destination.running() as dest:
        yield dest


def test_a_slow_resolver_ends_the_attempt_within_the_timeout(
    request: pytest.FixtureRequest, service: destination.Destination
) -> None:
    port = service.url.rsplit(":", 1)[1]
    table = destination.config(service, timeout_seconds=0.5, retry_schedule=[]) | {"url": f"http://localhost:{port}/"}
    app = forwarding_app(request, "sqlite", {"orders": table}, ["orders"])
    assert post(app, stripe_event("evt_slow")) == 200
    drain(app)
    release = threading.Event()
    looked_up: list[str] = []

    def slow(host: str, port: int) -> list[str]:
        looked_up.append(host)
        release.wait(30)
        return ["127.0.0.1"]

    rt = runtime(app)
    forwarder = Forwarder(rt.sessions, rt.settings.destinations, resolver=slow)
    started = time.monotonic()
    try:
        assert drain_forwarder(forwarder, timeout=20)
        assert time.monotonic() - started < 5.0  # 0.5 s given: well inside the lease (2 × 0.5 + 5 s)
    finally:
        forwarder.stop()
        release.set()
    assert looked_up == ["localhost"] and service.seen == []
    [(status, attempts)] = rows(app, "SELECT status, attempts FROM deliveries")
    assert (status, attempts) == ("failed", 1)
    [(outcome, error)] = rows(app, "SELECT outcome, error FROM delivery_attempts")
    assert outcome == "error" and "resolving the name took over 0.5 s" in error
