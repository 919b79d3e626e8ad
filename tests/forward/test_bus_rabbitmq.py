"""``kind = "rabbitmq"`` against a RabbitMQ node of the suite's own (never the machine's 5672): every
event arrives once as one message with its original bytes and a signature the ``standardwebhooks``
SDK verifies; an ordered destination's versions arrive in increasing order; a message no queue
receives (returned unroutable) is a failed attempt and the delivery waits ``pending``; a broker
killed and restarted holds the deliveries ``pending`` and each arrives once after; configuration
mistakes stop start-up with one line naming the destination and option."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from typing import Any

import pika
import pytest
from standardwebhooks.webhooks import Webhook

from tests.conftest import drain, rows, unavailable, wait_until
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
from tests.support import brokers, destination, servers
from webhooks.forward.signing import message_id


def table(server: brokers.Broker, exchange: str, **extra: Any) -> dict[str, Any]:
    """A ``[destinations.<name>]`` table for ``exchange`` on ``server`` (loopback: ``allow_private``)."""
    return {
        "kind": "rabbitmq",
        "url": server.url,
        "exchange": exchange,
        "secrets": [destination.SECRET],
        "allow_private": True,
        **extra,
    }


def channel(server: brokers.Broker) -> Iterator[Any]:
    connection = pika.BlockingConnection(pika.URLParameters(server.url))
    try:
        yield connection.channel()
    finally:
        connection.close()


def bound(server: brokers.Broker, exchange: str, *, queue: bool = True) -> str:
    """A durable topic exchange, with (unless ``queue`` is false) a queue bound to every key; the queue's name."""
    name = f"q-{exchange}"
    for ch in channel(server):
        ch.exchange_declare(exchange, "topic", durable=True)
        if queue:
            ch.queue_declare(name, durable=True)
            ch.queue_bind(name, exchange, routing_key="#")
    return name


def messages(server: brokers.Broker, queue: str) -> list[tuple[dict[str, str], bytes, Any]]:
    """The queue's messages, oldest first, as (headers, body, properties), each verified with the SDK."""
    found = []
    for ch in channel(server):
        while True:
            method, properties, body = ch.basic_get(queue, auto_ack=True)
            if method is None:
                break
            headers = {k: v.decode() if isinstance(v, bytes) else str(v) for k, v in properties.headers.items()}
            Webhook(destination.SECRET).verify(body, headers)  # raises on a bad signature
            found.append((headers, body, properties))
    return found


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_every_event_arrives_once_with_its_bytes_and_a_verifiable_signature(
    request: pytest.FixtureRequest, db: str, rabbitmq: brokers.Broker
) -> None:
    exchange = f"events-{uuid.uuid4().hex[:8]}"
    queue = bound(rabbitmq, exchange)
    app = forwarding_app(request, db, {"bus": table(rabbitmq, exchange)}, ["bus"])
    bodies = [bus_event(n) for n in range(EVENTS)]
    for body in bodies * COPIES:  # every event delivered three times by its provider
        assert post(app, body) == 200
    drain(app)
    settle_all(app)
    got = messages(rabbitmq, queue)
    assert len(got) == EVENTS
    assert sorted(body for _, body, _ in got) == sorted(bodies)  # the bytes as received, once each
    by_event = {headers["webhooks-event-id"]: (headers, body, props) for headers, body, props in got}
    for n in range(EVENTS):
        headers, body, props = by_event[f"evt_{n}"]
        assert set(headers) == HEADERS
        assert body == bodies[n]
        assert headers["webhook-id"] == props.message_id == message_id("stripe", f"evt_{n}", "bus")
        assert headers["webhooks-object"] == f"payment_intent/pi_{n}"
        assert props.content_type == headers["content-type"] == "application/json"
        assert props.delivery_mode == 2  # persistent
        assert headers["webhooks-endpoint"] == "stripe" and headers["webhooks-event-type"] == "payment_intent.succeeded"
    assert set(statuses(app).values()) == {"delivered"} and len(statuses(app)) == EVENTS
    assert {tuple(r) for r in rows(app, "SELECT response, outcome FROM delivery_attempts")} == {
        ("confirmed", "delivered")
    }


@pytest.mark.slow
def test_the_routing_key_is_the_event_type_unless_configured(
    request: pytest.FixtureRequest, rabbitmq: brokers.Broker
) -> None:
    exchange = f"keys-{uuid.uuid4().hex[:8]}"
    for ch in channel(rabbitmq):
        ch.exchange_declare(exchange, "direct", durable=True)
        ch.queue_declare(f"q-{exchange}", durable=True)
        ch.queue_bind(f"q-{exchange}", exchange, routing_key="payment_intent.succeeded")
        ch.queue_bind(f"q-{exchange}", exchange, routing_key="payments")
    dests = {"bus": table(rabbitmq, exchange), "keyed": table(rabbitmq, exchange, routing_key="payments")}
    app = forwarding_app(request, "sqlite", dests, ["bus", "keyed"])
    assert post(app, bus_event(1)) == 200
    drain(app)
    settle_all(app)
    assert set(statuses(app).values()) == {"delivered"} and len(statuses(app)) == 2
    assert len(messages(rabbitmq, f"q-{exchange}")) == 2


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_ordered_versions_arriving_shuffled_are_published_in_increasing_order(
    request: pytest.FixtureRequest, db: str, rabbitmq: brokers.Broker
) -> None:
    exchange = f"ordered-{uuid.uuid4().hex[:8]}"
    queue = bound(rabbitmq, exchange)
    app = forwarding_app(request, db, {"bus": table(rabbitmq, exchange, ordered=True)}, ["bus"])
    base = 1_700_000_000
    with forwarding(app):
        for v in (2, 0, 4, 1, 3):
            assert post(app, versioned(f"evt_{v}", "pi_x", base + v)) == 200
            drain(app)  # the forwarder meets the versions in this order
        wait_settled(app, 5)
    versions = [int(headers["webhooks-object-version"]) for headers, _, _ in messages(rabbitmq, queue)]
    assert versions == sorted(set(versions)), versions  # strictly increasing
    newest = max(int(r[0]) for r in rows(app, "SELECT object_version FROM deliveries"))
    assert versions[-1] == newest
    found = statuses(app)
    assert found["evt_4/bus"] == "delivered"
    assert len(versions) == sum(s == "delivered" for s in found.values())
    assert set(found.values()) <= {"delivered", "superseded"}


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_a_message_no_queue_receives_is_a_failed_attempt_and_waits_pending(
    request: pytest.FixtureRequest, db: str, rabbitmq: brokers.Broker
) -> None:
    exchange = f"unbound-{uuid.uuid4().hex[:8]}"
    bound(rabbitmq, exchange, queue=False)  # the exchange exists; no queue is bound to it
    app = forwarding_app(request, db, {"bus": table(rabbitmq, exchange)}, ["bus"])
    assert post(app, bus_event(3)) == 200
    drain(app)
    settle_all(app)
    assert statuses(app) == {"evt_3/bus": "pending"}
    [(error, outcome)] = rows(app, "SELECT error, outcome FROM delivery_attempts")
    assert outcome == "error"
    assert error.startswith("unroutable: exchange") and "'payment_intent.succeeded' to no queue" in error
    [(last_error,)] = rows(app, "SELECT last_error FROM deliveries")
    assert last_error == error


@pytest.mark.slow
def test_a_missing_exchange_is_refused_and_waits_pending(
    request: pytest.FixtureRequest, rabbitmq: brokers.Broker
) -> None:
    app = forwarding_app(request, "sqlite", {"bus": table(rabbitmq, f"none-{uuid.uuid4().hex[:8]}")}, ["bus"])
    assert post(app, bus_event(4)) == 200
    drain(app)
    settle_all(app)
    assert statuses(app) == {"evt_4/bus": "pending"}
    [(error,)] = rows(app, "SELECT error FROM delivery_attempts")
    assert error.startswith("refused: 404 NOT_FOUND"), error


@pytest.mark.slow
def test_a_broker_that_stops_answering_is_a_timeout_within_the_lease(
    request: pytest.FixtureRequest, rabbitmq: brokers.Broker
) -> None:
    """A broker frozen (SIGSTOP) after the connection opened never confirms: the publish ends after
    ``timeout_seconds`` as a timeout, the delivery ``pending`` (pika's own timers cannot end that wait)."""
    exchange = f"frozen-{uuid.uuid4().hex[:8]}"
    queue = bound(rabbitmq, exchange)
    dest = table(rabbitmq, exchange, timeout_seconds=1, retry_schedule=[600])
    app = forwarding_app(request, "sqlite", {"bus": dest}, ["bus"])
    assert rabbitmq.proc is not None
    with forwarding(app):
        assert post(app, bus_event(5)) == 200
        drain(app)
        wait_settled(app, 1)  # the pooled connection is open and confirming
        os.kill(rabbitmq.proc.pid, signal.SIGSTOP)
        try:
            assert post(app, bus_event(6)) == 200
            drain(app)
            wait_until(lambda: rows(app, "SELECT error FROM delivery_attempts WHERE error IS NOT NULL"), timeout=30)
        finally:
            os.kill(rabbitmq.proc.pid, signal.SIGCONT)
    [(error, seconds)] = rows(app, "SELECT error, seconds FROM delivery_attempts WHERE error IS NOT NULL")
    assert error.startswith("timeout: no confirm within 1 s"), error
    assert 1 <= seconds < 2 * 1 + 5  # inside the lease: twice the timeout plus its margin
    assert statuses(app)["evt_6/bus"] == "pending"
    assert [body for _, body, _ in messages(rabbitmq, queue)][:1] == [bus_event(5)]


@pytest.mark.slow
@pytest.mark.parametrize("db", ["postgres"])
def test_rabbitmq_killed_then_restarted_holds_deliveries_and_each_arrives_once(
    request: pytest.FixtureRequest, db: str
) -> None:
    try:
        server = brokers.RabbitMQ()
        server.start()
    except servers.Unavailable as exc:
        unavailable("RabbitMQ", exc)
    try:
        queue = bound(server, "outage")
        dest = table(server, "outage", retry_schedule=[0.3] * 50, probe_seconds=0.3, circuit_failures=5)
        app = forwarding_app(request, db, {"bus": dest | {"timeout_seconds": 2}}, ["bus"])
        server.kill()  # SIGKILL: no shutdown, no goodbye
        for n in range(10):
            assert post(app, bus_event(n)) == 200
        drain(app)
        with forwarding(app):
            wait_until(lambda: len(rows(app, "SELECT 1 FROM delivery_attempts")) >= 10, timeout=90)
            retried_while_down(app)  # the circuit opened and its probes failed too: not a fixed sleep
            assert set(statuses(app).values()) == {"pending"}
            errors = {str(r[0]) for r in rows(app, "SELECT error FROM delivery_attempts")}
            assert all(e.startswith(("connect:", "timeout:")) for e in errors), errors
            server.start()  # the same node, port and data: the durable exchange and queue are back
            # The circuit's probe doubles its wait after each failure while the node boots (an
            # Erlang VM: tens of seconds on a busy 2-core machine), so the first probe after the
            # restart may come as long after it as the boot took: a deadline past twice that.
            wait_settled(app, 10, timeout=300)
        got = messages(server, queue)
        ids = [headers["webhook-id"] for headers, _, _ in got]
        assert sorted(ids) == sorted(message_id("stripe", f"evt_{n}", "bus") for n in range(10))  # once each
        assert sorted(body for _, body, _ in got) == sorted(bus_event(n) for n in range(10))
    finally:
        server.remove()


def bus_table(**extra: Any) -> dict[str, Any]:
    base = {"kind": "rabbitmq", "url": "amqp://127.0.0.1:5673/", "exchange": "x", "secrets": [destination.SECRET]}
    return {**base, "allow_private": True, **extra}


@pytest.mark.parametrize(
    ("table", "words"),
    [
        (bus_table(exchange=None), ["exchange is required for destination kind rabbitmq"]),
        (bus_table(exchange=" "), ["exchange is required"]),
        (bus_table(routing_key=""), ["routing_key must be a non-empty string"]),
        (bus_table(url="http://127.0.0.1:5673/"), ["url:", "amqp:// or amqps://, not http"]),
        (bus_table(url="amqp://127.0.0.1:5673/?heartbeat=5"), ["url:", "no ?query"]),
        (bus_table(allow_private=False), ["url:", "127.0.0.1 is not a public address", "allow_private"]),
        (bus_table(stream="s"), ["stream is an option of destination kind redis-stream, not rabbitmq"]),
        (bus_table(subject="s"), ["subject is an option of destination kind nats, not rabbitmq"]),
        (bus_table(secrets=[]), ["no secrets configured"]),
    ],
)  # fmt: skip
def test_configuration_mistakes_stop_start_up_in_one_line(table: dict[str, Any], words: list[str]) -> None:
    message = refused(table)
    for word in words:
        assert word in message, message


def test_credentials_are_allowed_in_the_url_and_shown_nowhere() -> None:
    url = "amqps://worker:s3cret-pw@127.0.0.1:5671/payments"
    bus = load_bus(bus_table(url=url, routing_key="k")).destinations["bus"]
    assert (bus.kind, bus.target, bus.url) == ("rabbitmq", "amqps://***@127.0.0.1:5671/payments", url)
    assert bus.bus is not None and bus.bus.place == "x"
    assert "s3cret" not in repr(bus)


@pytest.mark.slow
def test_the_publisher_connects_to_the_address_the_guard_checked(
    request: pytest.FixtureRequest, rabbitmq: brokers.Broker
) -> None:
    """A name only the guard's resolver knows is reached at the address it gave; the same name
    resolving to loopback without ``allow_private`` is refused when connecting."""
    exchange = f"vetted-{uuid.uuid4().hex[:8]}"
    queue = bound(rabbitmq, exchange)
    url = f"amqp://guest:guest@broker.invalid:{rabbitmq.port}/%2F"
    app = forwarding_app(request, "sqlite", {"bus": table(rabbitmq, exchange, url=url)}, ["bus"])
    assert post(app, bus_event(2)) == 200
    drain(app)
    settle_all(app, resolver=lambda host, port: ["127.0.0.1"] if host == "broker.invalid" else [])
    assert statuses(app) == {"evt_2/bus": "delivered"}
    assert [body for _, body, _ in messages(rabbitmq, queue)] == [bus_event(2)]
