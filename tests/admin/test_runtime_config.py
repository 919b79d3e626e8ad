"""The runtime configuration API (#32): endpoints and destinations created, changed, deleted and
given secrets through ``/admin/api`` take effect on every process within a second; the file's
items are listed and refused (409 ``managed_by_file``); validation is the file's (400
``invalid_config`` with ``field``); every change is in ``/admin/api/audit`` with who made it; a
secret's value is in the database, the API and the audit nowhere after the answer that made it."""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.conftest import admin_headers, base_config, make_app, rows, stripe_event, stripe_headers, wait_until
from webhooks.admin import tokens
from webhooks.runtime import Runtime

KEYS = "k1:" + base64.b64encode(b"1" * 32).decode()
SECRET = "whsec_KnownSecretThatMustNeverShowUp_7f3a9c"
OTHER = "whsec_TheSecondSecretOfShopEu_55e1"
DEST_SECRET = "whsec_" + base64.b64encode(b"destination-secret-bytes-24").decode()
URL_TOKEN = "tok_QueryStringTokenNeverShown_91"


def api(client: FlaskClient, method: str, path: str, body: Any = None, **headers: str) -> Any:
    return client.open(f"/admin/api{path}", method=method, json=body, headers=admin_headers() | headers)


def rt(app: Flask) -> Runtime:
    found: Runtime = app.extensions["webhooks"]
    return found


def deliver(app: Flask, name: str, event_id: str, secret: str) -> int:
    body = stripe_event(event_id)
    return app.test_client().post(f"/webhooks/{name}", data=body, headers=stripe_headers(body, secret)).status_code


def config(request: pytest.FixtureRequest, db: str, **extra: str) -> dict[str, Any]:
    if db == "sqlite":
        return base_config(request.getfixturevalue("sqlite_url"), WEBHOOKS_ENCRYPTION_KEYS=KEYS, **extra)
    url, redis_url = request.getfixturevalue("pg_url"), request.getfixturevalue("redis_url")
    return base_config(url, REDIS_URL=redis_url, WEBHOOKS_ENCRYPTION_KEYS=KEYS, **extra)


@pytest.fixture
def app(sqlite_url: str) -> Flask:
    return make_app(base_config(sqlite_url, WEBHOOKS_ENCRYPTION_KEYS=KEYS))


LIVE_BOUND = 5.0  # seconds: see within_a_second


def within_a_second(predicate: Any) -> None:
    """``predicate`` comes true without a restart, well within the watcher's own rhythm (a 250 ms
    poll, a notice at commit). The bound is a generous 5 s, not the 1 s p99 the issue asks of the
    deployment: a test on a machine twice as slow and busy must hold, and the p99 is a
    benchmark's to measure, not a timed test's."""
    started = time.monotonic()
    wait_until(predicate, timeout=30, interval=0.01)
    assert time.monotonic() - started < LIVE_BOUND


SHOP = {"name": "shop-eu", "provider": "stripe", "secrets": [SECRET], "label": "merchant-7"}


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_an_endpoint_lives_on_every_process_within_a_second(db: str, request: pytest.FixtureRequest) -> None:
    first = make_app(config(request, db))
    second = make_app(config(request, db))
    client = first.test_client()
    created = api(client, "POST", "/endpoints", SHOP)
    assert created.status_code == 201, created.get_json()
    shown = created.get_json()
    assert {k: shown[k] for k in ("name", "provider", "url", "source", "label", "forward", "options")} == {
        "name": "shop-eu",
        "provider": "stripe",
        "url": "/webhooks/shop-eu",
        "source": "database",
        "label": "merchant-7",
        "forward": [],
        "options": {},
    }
    [signing] = shown["secrets"]
    assert set(signing) >= {"id", "fingerprint", "not_before", "expires_at", "created_at", "last_matched_at"}
    within_a_second(lambda: deliver(second, "shop-eu", "evt_live_1", SECRET) == 200)

    # A new secret, the first expired: refused with the old one within a second, taken with the new.
    added = api(client, "POST", "/endpoints/shop-eu/secrets", {"value": OTHER})
    assert added.status_code == 201 and "value" not in added.get_json()
    expired = api(client, "POST", f"/endpoints/shop-eu/secrets/{signing['id']}/expire", {})
    assert expired.status_code == 200 and expired.get_json()["expires_at"] is not None
    within_a_second(lambda: deliver(second, "shop-eu", "evt_live_2", SECRET) == 400)
    assert deliver(second, "shop-eu", "evt_live_3", OTHER) == 200

    # Deleted: 404 within a second everywhere; its events stay listed.
    assert api(client, "DELETE", "/endpoints/shop-eu").status_code == 204
    within_a_second(lambda: deliver(second, "shop-eu", "evt_live_4", OTHER) == 404)
    listed = api(client, "GET", "/events?endpoint=shop-eu").get_json()["events"]
    assert {"evt_live_1", "evt_live_3"} <= {e["event_id"] for e in listed}  # (2 and 4 if sent before the change)
    assert second.test_client().get("/healthz").get_json()["config_version"] == rt(first).config_version == 4


def test_the_file_owns_its_items(app: Flask) -> None:
    client = app.test_client()
    listed = {e["name"]: e for e in api(client, "GET", "/endpoints").get_json()["endpoints"]}
    assert listed["stripe"]["source"] == "file" and listed["stripe"]["url"] == "/webhooks/stripe"
    for method, path, body in [
        ("PATCH", "/endpoints/stripe", {"tolerance_seconds": 60}),
        ("DELETE", "/endpoints/stripe", None),
        ("POST", "/endpoints/stripe/secrets", {"value": OTHER}),
        ("POST", "/endpoints/stripe/secrets/sec_x/expire", {}),
    ]:
        answer = api(client, method, path, body)
        assert (answer.status_code, answer.get_json()["error"]) == (409, "managed_by_file"), path
    taken = api(client, "POST", "/endpoints", {**SHOP, "name": "stripe"})
    assert (taken.status_code, taken.get_json()["error"]) == (409, "exists")
    assert api(client, "POST", "/endpoints", SHOP).status_code == 201
    again = api(client, "POST", "/endpoints", SHOP)
    assert (again.status_code, again.get_json()["error"]) == (409, "exists")


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({"provider": "stripe", "secrets": [SECRET], "tolerance_second": 5}, "tolerance_second"),
        ({"provider": "nosuchkind", "secrets": [SECRET]}, "provider"),
        ({"provider": "stripe", "secrets": [SECRET], "tolerance_seconds": -1}, "tolerance_seconds"),
        ({"provider": "stripe", "secrets": ["env:STRIPE_WEBHOOK_SECRET"]}, None),
    ],
)
def test_validation_is_the_files(app: Flask, table: dict[str, Any], field: str | None) -> None:
    answer = api(app.test_client(), "POST", "/endpoints", {"name": "bad", **table})
    body = answer.get_json()
    assert (answer.status_code, body["error"], body["field"]) == (400, "invalid_config", field)
    assert "bad" in body["message"]


def test_no_key_no_secret_stored(sqlite_url: str) -> None:
    app = make_app(base_config(sqlite_url))  # no variable, no key file: as production without a key
    answer = api(app.test_client(), "POST", "/endpoints", SHOP)
    body = answer.get_json()
    assert (answer.status_code, body["error"]) == (409, "no_encryption_key")
    assert "WEBHOOKS_ENCRYPTION_KEYS" in body["message"]


def test_secrets_keep_one_live_and_at_most_five(app: Flask) -> None:
    client = app.test_client()
    api(client, "POST", "/endpoints", SHOP)
    [first] = api(client, "GET", "/endpoints?label=merchant-7").get_json()["endpoints"][0]["secrets"]
    last = api(client, "POST", f"/endpoints/shop-eu/secrets/{first['id']}/expire", {})
    assert (last.status_code, last.get_json()["error"]) == (409, "last_secret")
    for n in range(4):
        assert api(client, "POST", "/endpoints/shop-eu/secrets", {"value": f"{OTHER}{n}"}).status_code == 201
    sixth = api(client, "POST", "/endpoints/shop-eu/secrets", {"value": OTHER})
    assert (sixth.status_code, sixth.get_json()["error"]) == (409, "too_many_secrets")
    assert api(client, "GET", "/endpoints?label=nobody").get_json()["endpoints"] == []


def test_patch_takes_merge_patch_and_refuses_secrets(app: Flask) -> None:
    client = app.test_client()
    api(client, "POST", "/endpoints", SHOP)
    merge = {"Content-Type": "application/merge-patch+json"}
    changed = client.patch(
        "/admin/api/endpoints/shop-eu",
        data=b'{"tolerance_seconds": 60, "label": null}',
        headers=admin_headers() | merge,
    )
    assert changed.status_code == 200, changed.get_json()
    assert (changed.get_json()["options"], changed.get_json()["label"]) == ({"tolerance_seconds": 60}, None)
    assert rt(app).settings.endpoints["shop-eu"].tolerance_seconds == 60
    refused = api(client, "PATCH", "/endpoints/shop-eu", {"secrets": [OTHER]})
    assert (refused.status_code, refused.get_json()["field"]) == (400, "secrets")
    assert api(client, "PATCH", "/endpoints/nobody", {"label": "x"}).get_json()["error"] == "not_found"


def test_a_destination_rotates_and_its_url_token_stays_sealed(app: Flask) -> None:
    client = app.test_client()
    body = {"name": "orders", "url": f"http://127.0.0.1:9/in?token={URL_TOKEN}", "allow_private": True}
    created = api(client, "POST", "/destinations", {**body, "secrets": [DEST_SECRET]})
    assert created.status_code == 201, created.get_json()
    assert created.get_json()["url"] == "http://127.0.0.1:9/in?***"
    [listed] = [d for d in api(client, "GET", "/destinations").get_json()["destinations"] if d["name"] == "orders"]
    assert (listed["source"], listed["url"]) == ("database", "http://127.0.0.1:9/in?***")
    assert sorted(s["purpose"] for s in listed["secrets"]) == ["signing", "url"]  # the URL's query: sealed too
    assert rt(app).settings.destinations["orders"].url.endswith(URL_TOKEN)  # the sender gets the real one
    rotated = api(client, "POST", "/destinations/orders/rotate", {"grace_seconds": 60})
    found = rotated.get_json()
    assert rotated.status_code == 201 and set(found) == {"id", "fingerprint", "value", "previous_expires_at"}
    assert rt(app).settings.destinations["orders"].secrets == (found["value"], DEST_SECRET)  # both sign in the grace
    assert api(client, "POST", "/destinations/orders/rotate", {"grace_seconds": 604_801}).status_code == 400
    assert api(client, "POST", "/destinations/orders/rotate", {"grace_seconds": 0}).status_code == 201
    assert len(rt(app).settings.destinations["orders"].secrets) == 1
    assert api(client, "DELETE", "/destinations/orders").status_code == 204
    assert "orders" not in rt(app).settings.destinations


def test_every_change_is_audited_with_who(app: Flask) -> None:
    client = app.test_client()
    with rt(app).sessions() as session:
        token = tokens.create(
            session, "deploy-bot", False, now=__import__("datetime").datetime.now(__import__("datetime").UTC)
        )
    api(client, "POST", "/endpoints", SHOP)
    client.post(
        "/admin/api/endpoints/shop-eu/secrets", json={"value": OTHER}, headers={"Authorization": f"Bearer {token}"}
    )
    changes = api(client, "GET", "/audit").get_json()["changes"]
    assert [(c["who"], c["action"], c["target"]) for c in changes] == [
        ("deploy-bot", "add_secret", "endpoint shop-eu"),
        ("admin", "create", "endpoint shop-eu"),
    ]
    assert set(changes[0]) == {"id", "at", "who", "action", "target", "before", "after"}
    older = api(client, "GET", f"/audit?before={changes[0]['id']}&limit=1").get_json()["changes"]
    assert [c["action"] for c in older] == ["create"]


def test_a_secret_written_through_the_api_is_nowhere_after_its_answer(app: Flask, sqlite_url: str) -> None:
    client = app.test_client()
    answers = []
    assert api(client, "POST", "/endpoints", {**SHOP, "api_key": "sk_live_ApiKeyNeverShown_42"}).status_code == 201
    dest = {"name": "orders", "url": f"http://127.0.0.1:9/in?token={URL_TOKEN}", "allow_private": True}
    assert api(client, "POST", "/destinations", {**dest, "secrets": [DEST_SECRET]}).status_code == 201
    answers.append(api(client, "POST", "/endpoints/shop-eu/secrets", {"value": OTHER}))
    answers.append(api(client, "PATCH", "/endpoints/shop-eu", {"label": "merchant-8"}))
    answers.append(api(client, "PATCH", "/destinations/orders", {"timeout_seconds": 5}))
    answers += [api(client, "GET", path) for path in ("/endpoints", "/destinations", "/audit", "/tokens")]
    answers.append(client.get("/metrics", headers=admin_headers()))
    assert all(a.status_code < 300 for a in answers), [a.status_code for a in answers]
    known = [SECRET, OTHER, DEST_SECRET, URL_TOKEN, "sk_live_ApiKeyNeverShown_42"]
    for answer in answers:
        text = answer.get_data(as_text=True)
        assert not [k for k in known if k in text], answer.request.path
    database = Path(sqlite_url.removeprefix("sqlite:///"))
    raw = b"".join(p.read_bytes() for p in database.parent.glob(database.name + "*") if p.is_file())
    assert not [k for k in known if k.encode() in raw]
    assert deliver(app, "shop-eu", "evt_sealed", SECRET) == 200  # and yet it works


def test_an_sqs_destinations_aws_credentials_are_sealed_like_a_secret(app: Flask, sqlite_url: str) -> None:
    client = app.test_client()
    key_id, secret = "AKIAKeyIdNeverShown77", "AwsSecretAccessKeyNeverShown_3e1"
    queue = "http://127.0.0.1:9/123456789012/orders"
    body = {"name": "orders-sqs", "kind": "sqs", "queue_url": queue, "region": "us-east-1", "allow_private": True}
    credentials = {"access_key_id": key_id, "secret_access_key": secret}
    created = api(client, "POST", "/destinations", {**body, **credentials, "secrets": [DEST_SECRET]})
    assert created.status_code == 201, created.get_json()
    answers = [created, *(api(client, "GET", path) for path in ("/destinations", "/audit"))]
    [listed] = [d for d in answers[1].get_json()["destinations"] if d["name"] == "orders-sqs"]
    assert (listed["kind"], listed["target"]) == ("sqs", queue)
    assert sorted(s["purpose"] for s in listed["secrets"]) == ["access_key_id", "secret_access_key", "signing"]
    for answer in answers:
        assert key_id not in answer.get_data(as_text=True) and secret not in answer.get_data(as_text=True)
    database = Path(sqlite_url.removeprefix("sqlite:///"))
    raw = b"".join(p.read_bytes() for p in database.parent.glob(database.name + "*") if p.is_file())
    assert key_id.encode() not in raw and secret.encode() not in raw
    bus = rt(app).settings.destinations["orders-sqs"].bus  # the sender gets them
    assert bus is not None and (getattr(bus, "access_key_id", None), getattr(bus, "secret_access_key", None)) == (
        key_id,
        secret,
    )


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_a_kafka_destinations_sasl_password_is_sealed_like_a_secret(request: pytest.FixtureRequest, db: str) -> None:
    """The seam of a new credential option and the sealed store: a Kafka destination created through
    the API keeps its SASL password out of every answer and out of the database's bytes in clear
    (SQLite's file), and the sender gets it."""
    app = make_app(config(request, db))
    client = app.test_client()
    password = "KafkaSaslPasswordNeverShown_9d2"
    body = {
        "name": "orders-kafka",
        "kind": "kafka",
        "bootstrap_servers": ["127.0.0.1:9"],
        "topic": "orders",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "svc",
        "sasl_password": password,
        "allow_private": True,
        "secrets": [DEST_SECRET],
    }
    created = api(client, "POST", "/destinations", body)
    assert created.status_code == 201, created.get_json()
    answers = [created, *(api(client, "GET", path) for path in ("/destinations", "/audit"))]
    [listed] = [d for d in answers[1].get_json()["destinations"] if d["name"] == "orders-kafka"]
    assert (listed["kind"], listed["target"]) == ("kafka", "kafka://127.0.0.1:9")
    assert sorted(s["purpose"] for s in listed["secrets"]) == ["sasl_password", "signing"]
    for answer in answers:
        assert password not in answer.get_data(as_text=True)
    options = [str(r[0]) for r in rows(app, "SELECT options FROM config_items WHERE name = 'orders-kafka'")]
    assert options and password not in options[0] and "sasl_username" in options[0]
    if db == "sqlite":
        database = Path(request.getfixturevalue("sqlite_url").removeprefix("sqlite:///"))
        raw = b"".join(p.read_bytes() for p in database.parent.glob(database.name + "*") if p.is_file())
        assert password.encode() not in raw
    bus = rt(app).settings.destinations["orders-kafka"].bus  # the sender gets it
    assert bus is not None and getattr(bus, "sasl_password", None) == password


@pytest.mark.slow
def test_the_forwarder_follows_destinations_created_and_rotated_at_runtime(app: Flask) -> None:
    from tests.conftest import drain
    from tests.support import destination as local
    from webhooks.forward.dispatcher import Forwarder

    client = app.test_client()
    forwarder = Forwarder(rt(app).sessions, lambda: rt(app).settings.destinations).start()  # as a worker's
    try:
        with local.running() as dest:
            table = {"name": "orders", "url": dest.url + "?token=" + URL_TOKEN, "allow_private": True}
            assert api(client, "POST", "/destinations", {**table, "secrets": [dest.secret]}).status_code == 201
            assert api(client, "POST", "/endpoints", {**SHOP, "forward": ["orders"]}).status_code == 201
            assert deliver(app, "shop-eu", "evt_fwd_1", SECRET) == 200
            drain(app)
            wait_until(lambda: dest.ids() == ["evt_fwd_1"], timeout=30)
            assert api(client, "POST", "/destinations/orders/rotate", {"grace_seconds": 60}).status_code == 201
            assert deliver(app, "shop-eu", "evt_fwd_2", SECRET) == 200
            drain(app)
            wait_until(lambda: dest.ids() == ["evt_fwd_1", "evt_fwd_2"], timeout=30)  # the old secret still verifies
            assert api(client, "POST", "/destinations/orders/rotate", {"grace_seconds": 0}).status_code == 201
            assert deliver(app, "shop-eu", "evt_fwd_3", SECRET) == 200
            drain(app)
            wait_until(lambda: len(dest.seen) == 3, timeout=30)
            assert not dest.seen[-1].verified  # after the grace: only the newest signs, unknown to this oracle
    finally:
        forwarder.stop()
