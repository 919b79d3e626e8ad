"""A destination's ``filter`` (#42) where it meets forwarding, on both databases: only the events it
lets through get a delivery (with ``events`` globs by AND), each refusal is counted, the attempt
records only where the event went, headers are filtered on as stored, an ``ordered`` destination is
never held back by a refused version, and a bad filter is refused at load and by the admin API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from prometheus_client import REGISTRY

from tests.admin.test_runtime_config import DEST_SECRET, api, config
from tests.conftest import admin_headers, base_config, make_app, rows, runtime, stripe_event, stripe_headers
from tests.forward.test_forwarding import forward
from tests.support import destination
from tests.support.console import csrf_token
from webhooks.configuration.settings import load
from webhooks.errors import ConfigError


@pytest.fixture
def service() -> Iterator[destination.Destination]:
    with destination.running() as dest:
        yield dest


def app_for(request: pytest.FixtureRequest, db: str, dests: dict[str, Any]) -> Flask:
    url = request.getfixturevalue("sqlite_url" if db == "sqlite" else "pg_url")
    extra: dict[str, Any] = {} if db == "sqlite" else {"REDIS_URL": request.getfixturevalue("redis_url")}
    config = base_config(url, DESTINATIONS=dests, **extra)
    config["ENDPOINTS"]["stripe"]["forward"] = list(dests)
    return make_app(config)


def deliver(app: Flask, event_id: str, type_: str, obj: dict[str, Any], **headers: str) -> None:
    body = stripe_event(event_id, type_, obj=obj)
    answer = app.test_client().post("/webhooks/stripe", data=body, headers={**stripe_headers(body), **headers})
    assert answer.status_code == 200


def filtered(name: str) -> float:
    return REGISTRY.get_sample_value("webhooks_forward_filtered_total", {"destination": name}) or 0.0


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_only_what_the_filter_lets_through_is_delivered(
    request: pytest.FixtureRequest, db: str, service: destination.Destination
) -> None:
    refunds = {"data.object.amount": {"$gte": 5000}, "headers.x-shop": {"$in": ["s1", "s2"]}}
    app = app_for(request, db, {"finance": destination.config(service, events=["charge.*"], filter=refunds)})
    before = filtered("finance")
    deliver(app, "evt_big", "charge.refunded", {"id": "ch_1", "object": "charge", "amount": 7500}, **{"X-Shop": "s1"})
    deliver(app, "evt_small", "charge.refunded", {"id": "ch_2", "object": "charge", "amount": 100}, **{"X-Shop": "s1"})
    deliver(app, "evt_other_shop", "charge.refunded", {"id": "ch_3", "object": "charge", "amount": 9000})
    deliver(
        app, "evt_not_a_charge", "payment_intent.succeeded", {"id": "pi_1", "object": "payment_intent", "amount": 9000}
    )
    forward(app)
    assert [s.headers["webhooks-event-id"] for s in service.verified()] == ["evt_big"]
    assert [tuple(r) for r in rows(app, "SELECT event_id FROM deliveries")] == [("evt_big",)]
    assert filtered("finance") - before == 2  # the filter's two refusals; the glob's is not the filter's
    recorded = {
        r[0]: (r[1], r[2])
        for r in rows(
            app, "SELECT a.event_id, a.handlers, e.status FROM attempts a JOIN events e USING (endpoint, event_id)"
        )
    }
    handlers = {k: json.loads(v) if isinstance(v, str) else v for k, (v, _) in recorded.items()}
    assert "forward → finance" in handlers["evt_big"]
    assert "forward → finance" not in handlers["evt_small"]


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_an_ordered_destination_is_not_held_back_by_a_refused_version(
    request: pytest.FixtureRequest, db: str, service: destination.Destination
) -> None:
    dests = {"fulfil": destination.config(service, ordered=True, filter={"data.object.status": "succeeded"})}
    app = app_for(request, db, dests)
    for n, status in enumerate(["succeeded", "processing", "succeeded"], start=1):
        body = stripe_event(
            f"evt_v{n}",
            "payment_intent.updated",
            created=1700000000 + n,
            obj={"id": "pi_ord", "object": "payment_intent", "status": status},
        )
        assert app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200
        forward(app)
    assert [s.headers["webhooks-event-id"] for s in service.verified()] == ["evt_v1", "evt_v3"]
    assert {tuple(r) for r in rows(app, "SELECT event_id, status FROM deliveries")} == {
        ("evt_v1", "delivered"),
        ("evt_v3", "delivered"),
    }


def test_a_bad_filter_is_refused_at_load_and_by_the_admin_api(request: pytest.FixtureRequest) -> None:
    table = {"url": "http://127.0.0.1:9/in", "secrets": [DEST_SECRET], "allow_private": True}
    with pytest.raises(ConfigError, match=r"destination 'finance': filter: amount: unknown operator '\$gtee'"):
        load({"WEBHOOKS_CONFIG": "", "DESTINATIONS": {"finance": {**table, "filter": {"amount": {"$gtee": 1}}}}})
    app = make_app(config(request, "sqlite"))
    client = app.test_client()
    refused = api(client, "POST", "/destinations", {"name": "finance", **table, "filter": {"$xor": []}})
    assert refused.status_code == 400 and refused.get_json()["error"] == "invalid_config", refused.get_json()
    assert "filter: unknown operator '$xor'" in json.dumps(refused.get_json())
    good = api(client, "POST", "/destinations", {"name": "finance", **table, "filter": {"amount.value": {"$gt": 1}}})
    assert good.status_code == 201, good.get_json()
    assert runtime(app).settings.destinations["finance"].filter is not None


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_the_filter_test_says_whether_and_why_without_sending(
    request: pytest.FixtureRequest, db: str, service: destination.Destination
) -> None:
    rule = {"data.object.amount": {"$gte": 5000}, "headers.x-shop": "s1"}
    app = app_for(request, db, {"finance": destination.config(service, events=["charge.*"], filter=rule)})
    deliver(app, "evt_t_big", "charge.refunded", {"id": "ch_1", "object": "charge", "amount": 7500}, **{"X-Shop": "s1"})
    deliver(
        app, "evt_t_small", "charge.refunded", {"id": "ch_2", "object": "charge", "amount": 100}, **{"X-Shop": "s1"}
    )
    client = app.test_client()

    def asked(body: dict[str, Any], name: str = "finance") -> Any:
        return api(client, "POST", f"/destinations/{name}/filter-test", body)

    big = asked({"event": {"endpoint": "stripe", "event_id": "evt_t_big"}}).get_json()
    assert big == {"destination": "finance", "matches": True, "why": None}
    small = asked({"event": {"endpoint": "stripe", "event_id": "evt_t_small"}}).get_json()
    assert small == {"destination": "finance", "matches": False, "why": "data.object.amount $gte 5000: 100"}
    sample = {"type": "charge.refunded", "endpoint": "stripe", "body": {"data": {"object": {"amount": 6000}}}}
    assert asked({**sample, "headers": {"X-Shop": "s2"}}).get_json()["why"] == 'headers.x-shop $eq "s1": "s2"'
    assert asked({**sample, "headers": {"X-Shop": "s1"}}).get_json()["matches"] is True
    assert (
        asked({**sample, "type": "invoice.paid"}).get_json()["why"]
        == "type 'invoice.paid' is not in events ['charge.*']"
    )
    assert asked({"event": {"endpoint": "stripe", "event_id": "evt_nope"}}).status_code == 404
    assert asked(sample, name="nobody").status_code == 404
    assert asked({"type": 5, "endpoint": "stripe"}).get_json()["error"] == "bad_event"
    assert service.seen == [] and rows(app, "SELECT count(*) FROM deliveries")[0][0] == 0  # nothing sent or made


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_a_replay_to_a_destination_applies_its_filter_unless_forced(
    request: pytest.FixtureRequest, db: str, service: destination.Destination
) -> None:
    """The filter and a replay share the deliveries: an unforced replay (one event, or in bulk) leaves
    out what the filter refuses now and says why; a forced one sends it and the audit says forced.
    The event's account lists each destination, recomputed under the filter as it is now."""
    rule = {"data.object.amount": {"$gte": 5000}}
    app = app_for(request, db, {"finance": destination.config(service, filter=rule)})
    deliver(app, "evt_r_big", "charge.refunded", {"id": "ch_1", "object": "charge", "amount": 7500})
    deliver(app, "evt_r_small", "charge.refunded", {"id": "ch_2", "object": "charge", "amount": 100})
    forward(app)
    assert [s.headers["webhooks-event-id"] for s in service.verified()] == ["evt_r_big"]
    client = app.test_client()
    account = api(client, "GET", "/events/stripe/evt_r_small").get_json()["routing"]
    assert account == [
        {"destination": "finance", "matches": False, "why": "data.object.amount $gte 5000: 100", "recomputed": True}
    ]
    assert api(client, "GET", "/events/stripe/evt_r_big").get_json()["routing"][0]["matches"] is True
    page = client.get("/admin/events/stripe/evt_r_small", headers=admin_headers()).get_data(as_text=True)
    assert "Recomputed under each destination" in page and "data.object.amount $gte 5000: 100" in page

    one = api(client, "POST", "/events/stripe/evt_r_small/replay", {"destination": "finance", "reason": "x"})
    assert one.status_code == 409 and one.get_json()["error"] == "filtered", one.get_json()
    assert "data.object.amount $gte 5000: 100" in one.get_json()["detail"]
    bulk = api(client, "POST", "/events/replay", {"endpoint": "stripe", "reason": "x", "destination": "finance"})
    assert bulk.status_code == 202 and bulk.get_json()["count"] == 1, bulk.get_json()
    assert bulk.get_json()["refused"] == [
        {"endpoint": "stripe", "event_id": "evt_r_small", "why": "data.object.amount $gte 5000: 100"}
    ]
    forward(app)
    assert sorted(s.headers["webhooks-event-id"] for s in service.verified()) == ["evt_r_big", "evt_r_big"]

    forced = {"destination": "finance", "reason": "finance asked", "force": True}
    assert api(client, "POST", "/events/stripe/evt_r_small/replay", forced).status_code == 202
    forward(app)
    assert "evt_r_small" in [s.headers["webhooks-event-id"] for s in service.verified()]
    [(audit,)] = rows(app, "SELECT filter FROM replays WHERE reason = 'finance asked'")
    assert (json.loads(audit) if isinstance(audit, str) else audit)["forced"] is True


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_the_console_tests_a_destination_as_the_api_does_and_lists_its_filter(
    request: pytest.FixtureRequest, db: str, service: destination.Destination
) -> None:
    rule = {"data.object.amount": {"$gte": 5000}, "headers.x-shop": "s1"}
    app = app_for(request, db, {"finance": destination.config(service, events=["charge.*"], filter=rule)})
    deliver(
        app, "evt_c_small", "charge.refunded", {"id": "ch_2", "object": "charge", "amount": 100}, **{"X-Shop": "s1"}
    )
    client = app.test_client()
    [listed] = api(client, "GET", "/destinations").get_json()["destinations"]
    assert (listed["events"], listed["filter"]) == (["charge.*"], rule)  # the grammar as written
    page = client.get("/admin/destinations", headers=admin_headers()).get_data(as_text=True)
    assert "Test events and filter" in page and "data.object.amount" in page
    token = csrf_token(client, "/admin/destinations")
    url = "/admin/destinations/finance/filter-test"
    assert (
        client.post(url, data={"endpoint": "stripe", "event_id": "evt_c_small"}, headers=admin_headers()).status_code
        == 403
    )

    def tested(form: dict[str, str]) -> str:
        answer = client.post(url, data={"csrf_token": token, **form}, headers=admin_headers())
        assert answer.status_code == 303, answer.get_data(as_text=True)
        shown = client.get(answer.headers["Location"], headers=admin_headers()).get_data(as_text=True)
        return shown

    stored = tested({"endpoint": "stripe", "event_id": "evt_c_small"})
    assert "finance refuses it: data.object.amount $gte 5000: 100 (nothing was sent)" in stored
    sample = {"endpoint": "stripe", "type": "charge.refunded", "body": '{"data": {"object": {"amount": 9000}}}'}
    assert "finance takes it (nothing was sent)" in tested(sample | {"headers": "X-Shop: s1"})
    assert "headers.x-shop $eq &#34;s1&#34;: &#34;s2&#34;" in tested(sample | {"headers": "X-Shop: s2"})
    bad = client.post(url, data={"csrf_token": token, **sample, "body": "{"}, headers=admin_headers())
    assert bad.status_code == 400 and "not JSON" in bad.get_data(as_text=True)
    assert service.seen == [] and rows(app, "SELECT count(*) FROM deliveries")[0][0] == 0  # nothing sent or made


def test_the_console_form_takes_the_same_grammar_and_names_the_path(request: pytest.FixtureRequest) -> None:
    app = make_app(config(request, "sqlite"))
    client = app.test_client()
    token = csrf_token(client, "/admin/destinations/new")
    options = 'url = "http://127.0.0.1:9/in"\nallow_private = true\n'

    def created(filter_line: str) -> Any:
        form = {"csrf_token": token, "name": "finance", "secret": DEST_SECRET, "options": options + filter_line}
        return client.post("/admin/destinations/new", data=form, headers=admin_headers())

    bad = created('filter = { "amount" = { "$gtee" = 1 } }\n')
    assert bad.status_code == 400 and "filter: amount: unknown operator" in bad.get_data(as_text=True)
    assert "finance" not in runtime(app).settings.destinations
    good = created('filter = { "data.object.amount" = { "$gte" = 5000 } }\n')
    assert good.status_code == 303, good.get_data(as_text=True)
    made = runtime(app).settings.destinations["finance"].filter
    assert made is not None and made.source == {"data.object.amount": {"$gte": 5000}}
