"""Outages of a destination: refused connections then 503s open the circuit, which probes without
spending attempts and closes once the destination is back, and every delivery arrives once; a 429's
``Retry-After`` throttles without spending an attempt; a 410 pauses the destination until resumed."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from datetime import datetime

import pytest
from flask import Flask

from tests.conftest import drain, free_port, rows, runtime, stripe_event, wait_until
from tests.forward.conftest import Script, forwarding, forwarding_app, post, serving, wait_settled
from tests.support import destination
from webhooks.forward import deliveries
from webhooks.forward.signing import message_id

pytestmark = pytest.mark.slow
EVENTS = 30
CIRCUIT = 3
PROBE_SECONDS = 0.3


def state(app: Flask, column: str) -> object:
    """A column of destination d's ``destinations`` row (None until it has one)."""
    found = rows(app, f"SELECT {column} FROM destinations WHERE name = 'd'")
    return found[0][0] if found else None


def probes(app: Flask, opened: datetime) -> list[tuple[datetime, str]]:
    """The probes' attempts: failures that started once the circuit had waited (the requests in
    flight when it opened start within milliseconds of it, the first probe ``probe_seconds`` later)."""
    found = rows(app, "SELECT started_at, error FROM delivery_attempts WHERE outcome = 'probe_failed' ORDER BY id")
    started = [(datetime.fromisoformat(str(at)), str(error)) for at, error in found]
    return [(at, error) for at, error in started if (at - opened).total_seconds() >= PROBE_SECONDS * 0.8]


def outcomes(app: Flask) -> Counter[str]:
    return Counter(r[0] for r in rows(app, "SELECT outcome FROM delivery_attempts"))


def test_a_destination_down_then_failing_then_up_gets_every_delivery_once(request: pytest.FixtureRequest) -> None:
    port = free_port()  # nobody listens here yet: connections are refused
    config = {
        "url": f"http://127.0.0.1:{port}/hooks",
        "secrets": [destination.SECRET],
        "allow_private": True,
        "retry_schedule": [0.2] * 10,
        "circuit_failures": CIRCUIT,
        "probe_seconds": PROBE_SECONDS,
    }
    app = forwarding_app(request, "sqlite", {"d": config}, ["d"])
    for n in range(EVENTS):
        post(app, stripe_event(f"evt_{n}"))
    drain(app)
    script = Script(plan=lambda n: (503, {}, b"later") if n <= 2 else (200, {}, b"ok"))
    with forwarding(app):
        opened = datetime.fromisoformat(str(wait_until(lambda: state(app, "opened_at"))))
        wait_until(lambda: any(not e.startswith("HTTP") for _, e in probes(app, opened)))  # refused
        with serving(script, port):  # now it listens, but answers 503 (no Retry-After) twice
            wait_until(lambda: state(app, "opened_at") is None)
            wait_settled(app, EVENTS)
    assert set(deliveries_by_status(app)) == {"delivered"}
    expected = {message_id("stripe", f"evt_{n}", "d") for n in range(EVENTS)}
    assert Counter(a.id for a in script.ok()) == dict.fromkeys(expected, 1)
    assert [a.status for a in script.answered[:2]] == [503, 503]
    counted = outcomes(app)
    assert counted["error"] == CIRCUIT  # the run that opened the circuit; nothing spent while open
    assert counted["probe_failed"] >= 3 and counted["delivered"] == EVENTS
    by_delivery: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for event_id, outcome, number in rows(app, "SELECT event_id, outcome, number FROM delivery_attempts ORDER BY id"):
        by_delivery[event_id].append((outcome, number))
    for event_id, attempts in by_delivery.items():
        spent = 0
        for outcome, number in attempts:
            spent += outcome != "probe_failed"
            assert number == spent, (event_id, attempts)  # a probe does not count as an attempt
    # The first probe waits probe_seconds (0.3 s), however many requests in flight failed as it opened.
    assert (probes(app, opened)[0][0] - opened).total_seconds() < 5
    assert [e for _, e in probes(app, opened)][-2:] == ["HTTP 503", "HTTP 503"]
    [(spent,)] = rows(app, "SELECT max(attempts) FROM deliveries")
    assert spent <= CIRCUIT


def deliveries_by_status(app: Flask) -> Counter[str]:
    return Counter(r[0] for r in rows(app, "SELECT status FROM deliveries"))


def test_429_with_retry_after_throttles_without_spending_an_attempt(request: pytest.FixtureRequest) -> None:
    script = Script(plan=lambda n: (429, {"Retry-After": "1"}, b"slow down") if n == 1 else (200, {}, b"ok"))
    with serving(script) as service:
        app = forwarding_app(request, "sqlite", {"d": destination.config(service, retry_schedule=[60])}, ["d"])
        post(app, stripe_event("evt_429"))
        drain(app)
        with forwarding(app):
            wait_settled(app, 1)
    first, second = script.answered
    assert (first.status, second.status) == (429, 200) and first.id == second.id
    assert 0.9 <= second.at - first.at < 30  # about the second it asked for
    attempts = rows(app, "SELECT outcome, status_code, number FROM delivery_attempts ORDER BY id")
    assert [tuple(r) for r in attempts] == [("throttled", 429, 0), ("delivered", 200, 1)]
    assert [tuple(r) for r in rows(app, "SELECT status, attempts FROM deliveries")] == [("delivered", 1)]


def test_410_pauses_the_destination_until_it_is_resumed(request: pytest.FixtureRequest) -> None:
    script = Script(plan=lambda n: (410, {}, b"gone") if n == 1 else (200, {}, b"ok"))
    with serving(script) as service:
        app = forwarding_app(request, "sqlite", {"d": destination.config(service, max_in_flight=1)}, ["d"])
        for event_id in ("evt_gone_1", "evt_gone_2"):
            post(app, stripe_event(event_id))
        drain(app)
        with forwarding(app):
            wait_until(lambda: state(app, "paused"))
            deadline = time.monotonic() + 1.5  # a while of nothing sent: the forwarder looks every 0.5 s
            while time.monotonic() < deadline:
                assert len(script.answered) == 1
                time.sleep(0.05)
            assert deliveries_by_status(app) == {"pending": 2}
            deliveries.pause(runtime(app).sessions, "d", False, None)
            wait_settled(app, 2)
    assert [a.status for a in script.answered] == [410, 200, 200]
    assert deliveries_by_status(app) == {"delivered": 2}
    assert outcomes(app) == {"gone": 1, "delivered": 2}
