"""Isolation: a destination that never answers holds up only its own lane; another destination
configured for the same endpoint gets every delivery at once."""

from __future__ import annotations

import time

import pytest

from tests.conftest import drain, rows, stripe_event, wait_until
from tests.forward.conftest import Script, forwarding, forwarding_app, post, serving

pytestmark = pytest.mark.slow
EVENTS = 50
TIMEOUT = 5.0


def test_a_hanging_destination_does_not_slow_another(request: pytest.FixtureRequest) -> None:
    healthy = Script()
    with serving(Script()) as stuck, serving(healthy) as fine:
        stuck.hang.set()  # accepts, reads, never answers
        dests = {
            "stuck": {"url": stuck.url, "secrets": [stuck.secret], "allow_private": True, "timeout_seconds": TIMEOUT},
            "fine": {"url": fine.url, "secrets": [fine.secret], "allow_private": True, "timeout_seconds": TIMEOUT},
        }
        app = forwarding_app(request, "sqlite", dests, ["stuck", "fine"])
        for n in range(EVENTS):
            post(app, stripe_event(f"evt_{n}"))
        drain(app)
        with forwarding(app):
            started = time.monotonic()
            wait_until(lambda: len(healthy.ok()) == EVENTS, timeout=30, interval=0.01)
            took = time.monotonic() - started
            hanging = len(stuck.seen)
            stuck_attempts = rows(app, "SELECT count(*) FROM delivery_attempts WHERE destination = 'stuck'")[0][0]
            stuck.released.set()  # let its requests end, so the forwarder stops at once
        assert took < 3.0, took
        assert hanging >= 1 and stuck_attempts == 0  # it was still in its first requests' timeout
        assert len({a.id for a in healthy.ok()}) == EVENTS
