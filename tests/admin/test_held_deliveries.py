"""Deliveries of a destination no longer configured (issue 30): held, listed (API, console,
metrics), never sent to another service configured later under the same name, until an operator
adopts them (then sent) or fails them; both audited. Real local destinations count what they get."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.admin.test_destinations import H, forwarding, post
from tests.conftest import drain, rows, stripe_headers
from tests.forward.conftest import versioned
from tests.forward.test_forwarding import forward
from tests.support import destination
from tests.support.console import csrf_token


@pytest.fixture
def old() -> Iterator[destination.Destination]:
    with destination.running() as dest:
        yield dest


@pytest.fixture
def new() -> Iterator[destination.Destination]:
    with destination.running(destination.SECRET_2) as dest:
        yield dest


def removed(client: FlaskClient) -> list[dict[str, Any]]:
    answer = client.get("/admin/api/destinations?removed=1", headers=H)
    assert answer.status_code == 200
    found: list[dict[str, Any]] = answer.get_json()["destinations"]
    return found


def audits(app: Any) -> list[tuple[Any, int, Any]]:
    found = rows(app, "SELECT filter, count, event_ids FROM replays ORDER BY id")
    return [tuple(json.loads(v) if isinstance(v, str) else v for v in row) for row in found]


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_a_new_destination_under_the_old_name_is_not_sent_the_old_deliveries_until_adopted(
    request: pytest.FixtureRequest, db: str, old: destination.Destination, new: destination.Destination
) -> None:
    before = forwarding(request, db, {"orders": destination.config(old)}, ["orders"])
    post(before, "evt_1")
    post(before, "evt_2")
    drain(before)  # processed: two deliveries pending for the old service, nothing sent yet
    after = forwarding(request, db, {"orders": destination.config(new)}, [])  # another URL, same name
    client = after.test_client()
    forward(after)
    assert old.seen == [] and new.seen == []  # held: neither the new service nor the old one
    [held] = removed(client)
    assert held["name"] == "orders" and held["pending"] == 2 and held["oldest_pending_at"].endswith("Z")
    scraped = client.get("/metrics", headers=H).get_data(as_text=True)
    assert 'webhooks_forward_held{destination="orders"} 2.0' in scraped
    assert 'webhooks_forward_pending{destination="orders"} 2.0' in scraped

    adopted = client.post("/admin/api/destinations/orders/adopt", json={"reason": "moved"}, headers=H)
    assert adopted.status_code == 200 and adopted.get_json() == {"adopted": 2}
    assert removed(client) == []
    forward(after)
    assert sorted(new.ids()) == ["evt_1", "evt_2"] and all(s.verified for s in new.seen) and old.seen == []
    assert audits(after) == [({"adopt": "orders"}, 2, [["stripe", "evt_1"], ["stripe", "evt_2"]])]
    again = client.post("/admin/api/destinations/orders/adopt", headers=H)
    assert again.status_code == 200 and again.get_json() == {"adopted": 0}


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_a_removed_destination_is_listed_and_its_deliveries_failed_on_request(
    request: pytest.FixtureRequest, db: str, old: destination.Destination, new: destination.Destination
) -> None:
    before = forwarding(request, db, {"orders": destination.config(old)}, ["orders"])
    post(before, "evt_1")
    drain(before)
    after = forwarding(request, db, {"audit": destination.config(new)}, ["audit"])  # orders is gone
    client = after.test_client()
    forward(after)
    assert old.seen == [] and new.seen == []
    assert [d["name"] for d in removed(client)] == ["orders"]
    assert [d["name"] for d in client.get("/admin/api/destinations", headers=H).get_json()["destinations"]] == ["audit"]
    scraped = client.get("/metrics", headers=H).get_data(as_text=True)
    assert 'webhooks_forward_pending{destination="orders"} 1.0' in scraped  # never invisible

    refused = client.post("/admin/api/destinations/orders/adopt", json={}, headers=H)
    assert refused.status_code == 409 and refused.get_json() == {"error": "not_configured"}
    bad = client.post("/admin/api/destinations/orders/fail", json={"reason": 5}, headers=H)
    assert bad.status_code == 400 and bad.get_json() == {"error": "bad_reason"}
    failed = client.post("/admin/api/destinations/orders/fail", json={"reason": "retired"}, headers=H)
    assert failed.status_code == 200 and failed.get_json() == {"failed": 1}
    assert removed(client) == []
    assert rows(after, "SELECT destination, status FROM deliveries") == [("orders", "failed")]
    assert audits(after) == [({"fail": "orders"}, 1, [["stripe", "evt_1"]])]
    forward(after)
    assert old.seen == [] and new.seen == []


def test_the_same_destination_configured_again_keeps_its_deliveries(
    request: pytest.FixtureRequest, old: destination.Destination
) -> None:
    """A restart with the same URL is the same destination: nothing is held."""
    before = forwarding(request, "sqlite", {"orders": destination.config(old)}, ["orders"])
    post(before, "evt_1")
    drain(before)
    after = forwarding(request, "sqlite", {"orders": destination.config(old)}, ["orders"])
    assert removed(after.test_client()) == []
    forward(after)
    assert old.ids() == ["evt_1"]


def test_the_console_lists_held_deliveries_with_adopt_and_fail(
    request: pytest.FixtureRequest, old: destination.Destination, new: destination.Destination
) -> None:
    before = forwarding(request, "sqlite", {"orders": destination.config(old)}, ["orders"])
    post(before, "evt_1")
    drain(before)
    after = forwarding(request, "sqlite", {"orders": destination.config(new)}, [])
    client = after.test_client()
    html = client.get("/admin/destinations", headers=H).get_data(as_text=True)
    assert "<h2>Held deliveries</h2>" in html
    assert 'action="/admin/destinations/orders/adopt"' in html and 'action="/admin/destinations/orders/fail"' in html
    assert client.post("/admin/destinations/orders/adopt", data={"reason": "x"}, headers=H).status_code == 403
    token = csrf_token(client, "/admin/destinations")
    done = client.post("/admin/destinations/orders/adopt", data={"csrf_token": token, "reason": "moved"}, headers=H)
    assert done.status_code == 303
    html = client.get(done.headers["Location"], headers=H).get_data(as_text=True)
    assert "1 held adopted" in html and "<h2>Held deliveries</h2>" not in html
    forward(after)
    assert new.ids() == ["evt_1"] and old.seen == []


def test_held_deliveries_do_not_hold_up_an_ordered_destination_s_line(
    request: pytest.FixtureRequest, old: destination.Destination, new: destination.Destination
) -> None:
    """A held delivery of an object is not the head of the new destination's line for it; adopted
    later, it is older than what the destination has: superseded, not sent."""
    before = forwarding(request, "sqlite", {"orders": destination.config(old, ordered=True)}, ["orders"])
    before.test_client().post(
        "/webhooks/stripe", data=(b := versioned("evt_1", "pi_1", 100)), headers=stripe_headers(b)
    )
    drain(before)
    after = forwarding(request, "sqlite", {"orders": destination.config(new, ordered=True)}, ["orders"])
    client = after.test_client()
    client.post("/webhooks/stripe", data=(b := versioned("evt_2", "pi_1", 200)), headers=stripe_headers(b))
    forward(after)
    assert new.ids() == ["evt_2"] and old.seen == []
    assert [d["pending"] for d in removed(client)] == [1]
    assert client.post("/admin/api/destinations/orders/adopt", headers=H).get_json() == {"adopted": 1}
    forward(after)
    assert new.ids() == ["evt_2"]
    assert sorted(rows(after, "SELECT event_id, status FROM deliveries")) == [
        ("evt_1", "superseded"),
        ("evt_2", "delivered"),
    ]
