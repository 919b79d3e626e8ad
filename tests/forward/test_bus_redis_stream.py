"""``kind = "redis-stream"`` against a real redis-server of the test's own (never the queue's, never
the machine's 6379): every event arrives once as one stream entry with its original bytes and a
signature the ``standardwebhooks`` SDK verifies; an ordered destination's versions arrive in
increasing order; a Redis killed and restarted holds the deliveries ``pending`` and each arrives
once after; configuration mistakes stop start-up with one line naming the destination and option."""

from __future__ import annotations

import hmac
import os
import signal
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
from standardwebhooks.webhooks import Webhook

from tests.conftest import admin_headers, drain, rows, unavailable, wait_until
from tests.forward.conftest import (
    COPIES,
    EVENTS,
    HEADERS,
    bus_event,
    forwarding,
    forwarding_app,
    load_bus,
    post,
    refused,
    retried_while_down,
    settle_all,
    statuses,
    versioned,
    wait_settled,
)
from tests.support import destination, servers
from webhooks.configuration.destinations import KINDS
from webhooks.errors import ConfigError
from webhooks.forward.kinds import PUBLISHERS
from webhooks.forward.signing import message_id
from webhooks.service.serving import banner


def started() -> servers.Redis:
    try:
        server = servers.Redis()
        server.start()
    except servers.Unavailable as exc:
        unavailable("Redis", exc)
    return server


@pytest.fixture(scope="module")
def bus() -> Iterator[servers.Redis]:
    """A redis-server for the streams of this module's tests (the queue's Redis is another)."""
    server = started()
    yield server
    server.remove()


def table(server: servers.Redis, stream: str, **extra: Any) -> dict[str, Any]:
    """A ``[destinations.<name>]`` table for ``stream`` on ``server`` (loopback: ``allow_private``)."""
    return {
        "kind": "redis-stream",
        "url": server.url,
        "stream": stream,
        "secrets": [destination.SECRET],
        "allow_private": True,
        **extra,
    }


def entries(server: servers.Redis, stream: str) -> list[dict[str, bytes]]:
    """The stream's entries, oldest first, as field → value, each verified with the SDK (the consumer)."""
    client = redis.Redis(port=server.port)
    try:
        found = [{k.decode(): v for k, v in fields.items()} for _, fields in client.xrange(stream)]
    finally:
        client.close()
    for fields in found:
        headers = {k: v.decode() for k, v in fields.items() if k != "body"}
        Webhook(destination.SECRET).verify(fields["body"], headers)  # raises on a bad signature
        assert verified_from_backlog(destination.SECRET, {k.encode(): v for k, v in fields.items()}) == fields["body"]
    return found


def verified_from_backlog(secret: str, fields: dict[bytes, bytes]) -> bytes:
    """docs/buses/redis-stream.md's check of an entry older than the SDK's timestamp tolerance, verbatim."""
    msg_id = fields[b"webhook-id"].decode()
    when = datetime.fromtimestamp(int(fields[b"webhook-timestamp"]), UTC)
    expected = Webhook(secret).sign(msg_id, when, fields[b"body"].decode())
    if not any(hmac.compare_digest(expected, s) for s in fields[b"webhook-signature"].decode().split()):
        raise ValueError("bad signature")
    return fields[b"body"]


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_every_event_arrives_once_with_its_bytes_and_a_verifiable_signature(
    request: pytest.FixtureRequest, db: str, bus: servers.Redis
) -> None:
    stream = f"events-{uuid.uuid4().hex[:8]}"
    app = forwarding_app(request, db, {"bus": table(bus, stream, maxlen=1000)}, ["bus"])
    bodies = [bus_event(n) for n in range(EVENTS)]
    for body in bodies * COPIES:  # every event delivered three times by its provider
        assert post(app, body) == 200
    drain(app)
    settle_all(app)
    got = entries(bus, stream)
    assert len(got) == EVENTS
    assert sorted(e["body"] for e in got) == sorted(bodies)  # the bytes as received, once each
    by_event = {e["webhooks-event-id"].decode(): e for e in got}
    for n in range(EVENTS):
        fields = by_event[f"evt_{n}"]
        assert set(fields) == {"body", *HEADERS}
        assert fields["body"] == bodies[n]
        assert fields["webhook-id"].decode() == message_id("stripe", f"evt_{n}", "bus")
        assert fields["webhooks-object"] == f"payment_intent/pi_{n}".encode()
        assert fields["content-type"] == b"application/json"
        assert fields["webhooks-endpoint"] == b"stripe" and fields["webhooks-event-type"] == b"payment_intent.succeeded"
    assert set(statuses(app).values()) == {"delivered"} and len(statuses(app)) == EVENTS
    answers = rows(app, "SELECT response, outcome FROM delivery_attempts")
    assert {outcome for _, outcome in answers} == {"delivered"}
    stream_ids = {key.decode() for key, _ in redis.Redis(port=bus.port).xrange(stream)}
    assert {response for response, _ in answers} == stream_ids  # each attempt keeps the entry's id


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_ordered_versions_arriving_shuffled_are_added_in_increasing_order(
    request: pytest.FixtureRequest, db: str, bus: servers.Redis
) -> None:
    stream = f"ordered-{uuid.uuid4().hex[:8]}"
    app = forwarding_app(request, db, {"bus": table(bus, stream, ordered=True)}, ["bus"])
    base = 1_700_000_000
    with forwarding(app):
        for v in (2, 0, 4, 1, 3):
            assert post(app, versioned(f"evt_{v}", "pi_x", base + v)) == 200
            drain(app)  # the forwarder meets the versions in this order
        wait_settled(app, 5)
    versions = [int(e["webhooks-object-version"]) for e in entries(bus, stream)]
    assert versions == sorted(set(versions)), versions  # strictly increasing
    newest = max(int(r[0]) for r in rows(app, "SELECT object_version FROM deliveries"))
    assert versions[-1] == newest
    found = statuses(app)
    assert found["evt_4/bus"] == "delivered"
    assert len(versions) == sum(s == "delivered" for s in found.values())
    assert set(found.values()) <= {"delivered", "superseded"}


@pytest.mark.slow
@pytest.mark.parametrize("db", ["postgres", "sqlite"])
def test_redis_killed_then_restarted_holds_deliveries_and_each_arrives_once(
    request: pytest.FixtureRequest, db: str
) -> None:
    server = started()
    try:
        dest = table(server, "outage", retry_schedule=[0.3] * 50, probe_seconds=0.3, circuit_failures=5)
        app = forwarding_app(request, db, {"bus": dest | {"timeout_seconds": 2}}, ["bus"])
        assert server.proc is not None
        os.kill(server.proc.pid, signal.SIGKILL)  # its process killed: no shutdown, no goodbye
        server.proc.wait()
        for n in range(10):
            assert post(app, bus_event(n)) == 200
        drain(app)
        with forwarding(app):
            wait_until(lambda: len(rows(app, "SELECT 1 FROM delivery_attempts")) >= 10, timeout=30)
            retried_while_down(app)  # the circuit opened and its probes failed too: not a fixed sleep
            assert set(statuses(app).values()) == {"pending"}
            errors = {str(r[0]) for r in rows(app, "SELECT error FROM delivery_attempts")}
            assert all(e.startswith(("connect:", "timeout:")) for e in errors), errors
            assert not any(
                o != "error" and o != "probe_failed" for (o,) in rows(app, "SELECT outcome FROM delivery_attempts")
            )
            server.stop()  # reaps the killed process's leftovers; the restart is on the same port
            server.start()
            wait_settled(app, 10)
        got = entries(server, "outage")
        ids = [e["webhook-id"].decode() for e in got]
        assert sorted(ids) == sorted(message_id("stripe", f"evt_{n}", "bus") for n in range(10))  # once each
        assert sorted(e["body"] for e in got) == sorted(bus_event(n) for n in range(10))
    finally:
        server.remove()


def bus_table(**extra: Any) -> dict[str, Any]:
    base = {"kind": "redis-stream", "url": "redis://127.0.0.1:6390/0", "stream": "s", "secrets": [destination.SECRET]}
    return {**base, "allow_private": True, **extra}


@pytest.mark.parametrize(
    ("table", "words"),
    [
        (bus_table(kind="kinesis"), ["kind 'kinesis' is not a destination kind", "known: http, redis-stream"]),
        (bus_table(stream=None), ["stream is required"]),
        (bus_table(stream=" "), ["stream is required"]),
        (bus_table(url="http://127.0.0.1:6390/"), ["url:", "redis:// or rediss://, not http"]),
        (bus_table(url=None), ["url is required"]),
        (bus_table(url="redis://127.0.0.1:6390/x"), ["url:", "a database number"]),
        (bus_table(url="redis://127.0.0.1:6390/0?ssl=1"), ["url:", "no ?query"]),
        (bus_table(maxlen=0), ["maxlen must be a positive whole number"]),
        (bus_table(maxlen=1.5), ["maxlen must be a positive whole number"]),
        (bus_table(allow_private=False), ["url:", "127.0.0.1 is not a public address", "allow_private"]),
        (bus_table(url="redis://169.254.169.254/0"), ["url:", "cloud metadata address"]),
        (bus_table(exchange="x"), ["exchange is an option of destination kind rabbitmq, not redis-stream"]),
        (bus_table(queue="x"), ["unknown key 'queue'"]),
        (bus_table(streem="x"), ["unknown key 'streem'", "did you mean 'stream'"]),
        ({"url": "http://127.0.0.1:9/", "secrets": [destination.SECRET], "allow_private": True, "stream": "s"},
         ["stream is an option of destination kind redis-stream, not http"]),
        ({"url": "http://u:p@127.0.0.1:9/", "secrets": [destination.SECRET], "allow_private": True},
         ["url:", "no user:password@"]),
        (bus_table(secrets=[]), ["no secrets configured"]),
    ],
)  # fmt: skip
def test_configuration_mistakes_stop_start_up_in_one_line(table: dict[str, Any], words: list[str]) -> None:
    message = refused(table)
    for word in words:
        assert word in message, message


def test_credentials_are_allowed_in_a_bus_url_and_shown_nowhere(request: pytest.FixtureRequest) -> None:
    url = "rediss://worker:s3cret-pw@127.0.0.1:6390/2"
    bus = load_bus(bus_table(url=url, maxlen=500)).destinations["bus"]
    assert (bus.kind, bus.target, bus.url) == ("redis-stream", "rediss://***@127.0.0.1:6390/2", url)
    assert bus.bus is not None and (bus.bus.stream, bus.bus.maxlen) == ("s", 500)
    assert "s3cret" not in repr(bus)
    settings = load_bus(bus_table(url=url))
    assert "s3cret" not in banner(settings, ["http://127.0.0.1:8000"], None)
    assert bus.identity == load_bus(bus_table(url="rediss://other:pw2@127.0.0.1:6390/2")).destinations["bus"].identity
    assert bus.identity != load_bus(bus_table(url=url, stream="t")).destinations["bus"].identity
    with pytest.raises(ConfigError) as caught:
        load_bus(bus_table(url="rediss://worker:s3cret-pw@10.1.2.3:6390/2", allow_private=False))
    assert "s3cret" not in str(caught.value)

    app = forwarding_app(request, "sqlite", {"bus": bus_table(url=url)}, ["bus"])
    answer = app.test_client().get("/admin/api/destinations", headers=admin_headers())
    [shown] = answer.get_json()["destinations"]
    assert (shown["kind"], shown["target"]) == ("redis-stream", "rediss://***@127.0.0.1:6390/2") and "url" not in shown
    page = app.test_client().get("/admin/destinations", headers=admin_headers()).get_data(as_text=True)
    assert "redis-stream rediss://***@127.0.0.1:6390/2" in page
    assert "s3cret" not in answer.get_data(as_text=True) + page


def test_an_http_destination_is_kind_http_with_its_url_as_target() -> None:
    http = load_bus({"url": "http://127.0.0.1:9/", "secrets": [destination.SECRET], "allow_private": True})
    assert (http.destinations["bus"].kind, http.destinations["bus"].target) == ("http", "http://127.0.0.1:9/")


@pytest.mark.slow
def test_a_broker_name_resolving_to_loopback_is_refused_when_connecting(
    request: pytest.FixtureRequest, bus: servers.Redis
) -> None:
    """The guard judges the address each connection opens to: a name that resolves to loopback once
    the service runs (DNS rebinding) is refused, and the delivery waits ``pending``."""
    url = f"redis://broker.invalid:{bus.port}/0"  # does not resolve at start-up: the connect decides
    app = forwarding_app(request, "sqlite", {"bus": table(bus, "rebound", url=url, allow_private=False)}, ["bus"])
    assert post(app, bus_event(1)) == 200
    drain(app)
    settle_all(app, resolver=lambda host, port: ["127.0.0.1"])
    assert statuses(app) == {"evt_1/bus": "pending"}
    [(error,)] = rows(app, "SELECT error FROM delivery_attempts")
    assert error.startswith("refused: redis://broker.invalid:") and "not a public address" in error
    assert not redis.Redis(port=bus.port).exists("rebound")


@pytest.mark.slow
def test_the_publisher_connects_to_the_address_the_guard_checked(
    request: pytest.FixtureRequest, bus: servers.Redis
) -> None:
    """A name only the guard's resolver knows is reached at the address it gave: the client never
    looks the name up itself."""
    url = f"redis://broker.invalid:{bus.port}/0"
    app = forwarding_app(request, "sqlite", {"bus": table(bus, "vetted", url=url)}, ["bus"])
    assert post(app, bus_event(2)) == 200
    drain(app)
    settle_all(app, resolver=lambda host, port: ["127.0.0.1"] if host == "broker.invalid" else [])
    assert statuses(app) == {"evt_2/bus": "delivered"}
    assert [e["body"] for e in entries(bus, "vetted")] == [bus_event(2)]


def test_every_destination_kind_has_a_publisher() -> None:
    assert set(PUBLISHERS) == set(KINDS)
