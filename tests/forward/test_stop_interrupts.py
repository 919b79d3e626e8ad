"""A worker's stop and a forward under way (#38): past ``WEBHOOKS_STOP_TIMEOUT`` a send that has
not come back is interrupted: its delivery is released at once (still ``pending``, due now, its
lease taken back), with an ``interrupted`` attempt that spends nothing, so the next worker sends
it without waiting for the lease to end; the late answer of the interrupted send settles nothing."""

from __future__ import annotations

import threading
import time

import pytest

from tests.conftest import drain, rows, runtime, stripe_event, wait_until
from tests.forward.conftest import Script, forwarding_app, post, serving
from tests.support import destination
from webhooks.forward.dispatcher import Forwarder
from webhooks.forward.dispatcher import drain as drain_forwarder


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_a_send_under_way_at_the_stop_timeout_is_released_at_once(request: pytest.FixtureRequest, db: str) -> None:
    hold = threading.Event()

    def plan(n: int) -> destination.Answer:
        if n == 1:
            hold.wait(60)  # the first send hangs (a destination that stopped answering)
        return (200, {}, b"ok")

    script = Script(plan=plan)
    with serving(script) as dest:
        table = {"url": dest.url, "secrets": [destination.SECRET], "allow_private": True, "timeout_seconds": 30}
        app = forwarding_app(request, db, {"d": table}, ["d"])
        assert post(app, stripe_event("evt_hung")) == 200
        drain(app)
        rt = runtime(app)
        first = Forwarder(rt.sessions, rt.settings.destinations).start()
        try:
            wait_until(lambda: sum(script.in_flight.values()) == 1)  # the send is under way
            started = time.monotonic()
            first.stop(timeout=0.2)  # the stop's window has passed
            stopped = time.monotonic() - started
        finally:
            hold.set()
        assert stopped < 5  # not the send's 30 s timeout, nor its lease's 60 s
        [(status, attempts, leased_until)] = rows(app, "SELECT status, attempts, leased_until FROM deliveries")
        assert (status, attempts, leased_until) == ("pending", 0, None)
        [(outcome, number, error)] = rows(app, "SELECT outcome, number, error FROM delivery_attempts")
        assert (outcome, number) == ("interrupted", 0) and "WEBHOOKS_STOP_TIMEOUT" in str(error)
        # The hung send's answer came back meanwhile (hold was set): it settles nothing.
        wait_until(lambda: len(script.answered) == 1)
        second = Forwarder(rt.sessions, rt.settings.destinations)
        try:
            released = time.monotonic()
            assert drain_forwarder(second, timeout=30)
            assert time.monotonic() - released < 10  # at once, not after a lease
        finally:
            second.stop()
    assert rows(app, "SELECT status, attempts FROM deliveries") == [("delivered", 1)]
    outcomes = [r[0] for r in rows(app, "SELECT outcome FROM delivery_attempts ORDER BY id")]
    assert outcomes == ["interrupted", "delivered"]
    assert len({a.id for a in script.answered}) == 1  # one webhook-id, sent twice at most
