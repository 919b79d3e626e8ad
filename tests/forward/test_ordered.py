"""Ordered destinations: whatever order a provider's versions of an object arrive in, the destination
receives them in increasing version order, one request per object at a time; an older version that
arrives after a newer was sent is ``superseded`` (not sent) unless an operator replays it."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

import pytest

from tests.conftest import drain, rows, runtime, wait_until
from tests.forward.conftest import (
    Script,
    forwarding,
    forwarding_app,
    post,
    serving,
    settle_all,
    versioned,
    wait_settled,
)
from tests.support import destination
from webhooks.forward import deliveries
from webhooks.forward.signing import message_id

pytestmark = pytest.mark.slow
VERSIONS = 5
BASE = 1_700_000_000
# Six orders of the five versions (0 is the oldest): reversed, and shuffled ones.
ORDERS = [(4, 3, 2, 1, 0), (2, 0, 4, 1, 3), (1, 3, 0, 4, 2), (3, 4, 1, 0, 2), (0, 2, 1, 4, 3), (4, 0, 3, 2, 1)]


def by_object(script: Script) -> dict[str, list[int]]:
    sent: dict[str, list[int]] = defaultdict(list)
    for answered in script.ok():
        assert answered.object is not None and answered.version is not None
        sent[answered.object].append(answered.version)
    return sent


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_versions_arriving_in_any_order_are_sent_in_increasing_order(request: pytest.FixtureRequest, db: str) -> None:
    script = Script()
    with serving(script) as service:
        app = forwarding_app(request, db, {"o": destination.config(service, ordered=True)}, ["o"])
        with forwarding(app):
            for k, order in enumerate(ORDERS):
                for v in order:
                    assert post(app, versioned(f"evt_{k}_{v}", f"pi_{k}", BASE + v)) == 200
                    drain(app)  # the job runs now: the forwarder meets the versions in this order
                    if k == 0:  # reversed: the newest is sent before the older ones arrive
                        wait_until(lambda: script.ok())
            wait_settled(app, len(ORDERS) * VERSIONS)
        sent = by_object(script)
        assert sorted(sent) == [f"payment_intent/pi_{k}" for k in range(len(ORDERS))]
        for versions in sent.values():
            assert versions == sorted(set(versions)), versions  # strictly increasing
        assert len(sent["payment_intent/pi_0"]) == 1  # the newest came first: nothing older is sent
        found = rows(app, "SELECT event_id, status FROM deliveries")
        status = {r[0]: r[1] for r in found}
        for k in range(len(ORDERS)):
            assert status[f"evt_{k}_{VERSIONS - 1}"] == "delivered"  # the newest always arrives
        delivered = {a.id for a in script.ok()}
        superseded = rows(app, "SELECT event_id FROM delivery_attempts WHERE outcome = 'superseded'")
        for event_id, state in status.items():
            if message_id("stripe", event_id, "o") not in delivered:
                assert state == "superseded", event_id
                assert (event_id,) in [tuple(r) for r in superseded]
            else:
                assert state == "delivered", event_id
        assert [s for s in status.values() if s == "superseded"] and len(superseded) == sum(
            s == "superseded" for s in status.values()
        )

        # A forced replay sends the superseded oldest version all the same.
        with runtime(app).sessions.begin() as session:
            deliveries.replay(session, [("stripe", "evt_0_0")], "o", datetime.now(UTC))
        settle_all(app)
        assert script.ok()[-1].id == message_id("stripe", "evt_0_0", "o")
        assert rows(app, "SELECT status FROM deliveries WHERE event_id = 'evt_0_0'")[0][0] == "delivered"


def test_one_request_per_object_in_flight_while_objects_go_in_parallel(request: pytest.FixtureRequest) -> None:
    objects, versions = 100, 3
    script = Script(delay=0.03)
    with serving(script) as service:
        dests = {"o": destination.config(service, ordered=True, max_in_flight=8)}
        app = forwarding_app(request, "sqlite", dests, ["o"])
        for v in range(versions):  # interleaved: every object's first version, then the second…
            for n in range(objects):
                post(app, versioned(f"evt_{n}_{v}", f"pi_{n}", BASE + v))
        drain(app)  # every version of every object pending at once
        with forwarding(app):
            wait_settled(app, objects * versions, timeout=120)
        assert script.most_per_object == 1
        assert 1 < script.most_at_once <= 8  # several objects at once, within max_in_flight
        sent = by_object(script)
        assert len(sent) == objects
        for versions_sent in sent.values():  # every version sent (each was newer), oldest first
            assert len(versions_sent) == versions and versions_sent == sorted(set(versions_sent))


def test_an_older_version_being_retried_holds_back_the_newer(request: pytest.FixtureRequest) -> None:
    script = Script(plan=lambda n: (500, {}, b"boom") if n == 1 else (200, {}, b"ok"))
    with serving(script) as service:
        dests = {"o": destination.config(service, ordered=True, retry_schedule=[0.3])}
        app = forwarding_app(request, "sqlite", dests, ["o"])
        for v in range(2):
            post(app, versioned(f"evt_{v}", "pi_1", BASE + v))
        drain(app)
        with forwarding(app):
            wait_settled(app, 2)
    older, newer = (message_id("stripe", f"evt_{v}", "o") for v in range(2))
    assert [(a.id, a.status) for a in script.answered] == [(older, 500), (older, 200), (newer, 200)]
