"""``kind = "kafka"`` against a Tansu broker of the suite's own (Kafka's protocol; memory only): every
event arrives once as one message with its original bytes, its key and a signature the
``standardwebhooks`` SDK verifies; an ordered destination's versions arrive in increasing order on
one partition; a missing topic holds the deliveries ``pending`` (never created by webhooks); a broker
killed and restarted holds them ``pending`` and each arrives once after; a broker whose metadata
advertises an address the guard refuses is never produced to; configuration mistakes stop start-up
with one line. Consumers assign partitions themselves (a group join costs the broker ~23 s)."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
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
    silent_attempts,
    statuses,
    versioned,
    wait_settled,
)
from tests.support import brokers, destination, servers
from webhooks import tracing
from webhooks.forward.kafka import brokers_refused
from webhooks.forward.signing import message_id
from webhooks.guard import system_resolver

Message = tuple[dict[str, str], bytes, bytes, int]  # (headers, value, key, partition)


def table(server: brokers.Broker, topic: str, **extra: Any) -> dict[str, Any]:
    """A ``[destinations.<name>]`` table for ``topic`` on ``server`` (loopback: ``allow_private``)."""
    return {
        "kind": "kafka",
        "bootstrap_servers": server.url,
        "topic": topic,
        "secrets": [destination.SECRET],
        "allow_private": True,
        **extra,
    }


@contextlib.contextmanager
def own_tansu(advertised: str | None = None) -> Iterator[brokers.Tansu]:
    """A Tansu broker of this test's own (one it may kill, or that advertises ``advertised``)."""
    try:
        server = brokers.Tansu(advertised)
        server.start()
    except servers.Unavailable as exc:
        unavailable("Tansu (Kafka)", exc)
    try:
        yield server
    finally:
        server.remove()


def made_topic(server: brokers.Broker, partitions: int = 3) -> str:
    assert isinstance(server, brokers.Tansu)
    topic = f"t-{uuid.uuid4().hex[:8]}"
    server.create_topic(topic, partitions)
    return topic


def held(server: brokers.Broker, topic: str) -> int:
    """The messages the topic holds (its partitions' high watermarks), read without consuming them."""
    admin = AdminClient({"bootstrap.servers": server.url})
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
    consumer = Consumer({"bootstrap.servers": server.url, "group.id": "tests"})
    try:
        marks = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in partitions]
    finally:
        consumer.close()
    return sum(high - low for low, high in marks)


def messages(server: brokers.Broker, topic: str, count: int, timeout: float = 30) -> list[Message]:
    """The topic's messages from its start, by partition then offset, until ``count`` have come (or
    ``timeout``), each verified with the SDK; a consumer that assigns partitions (no group join)."""
    admin = AdminClient({"bootstrap.servers": server.url})
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
    consumer = Consumer({"bootstrap.servers": server.url, "group.id": "tests", "enable.auto.commit": False})
    found: list[Message] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        deadline = time.monotonic() + timeout
        while len(found) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None or message.error():
                continue
            headers = {k: (v or b"").decode() for k, v in message.headers() or []}
            found.append((headers, message.value() or b"", message.key() or b"", message.partition()))
        # anything beyond count: a short extra read (a copy would show here)
        extra_until = time.monotonic() + 1.0
        while time.monotonic() < extra_until:
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                headers = {k: (v or b"").decode() for k, v in message.headers() or []}
                found.append((headers, message.value() or b"", message.key() or b"", message.partition()))
    finally:
        consumer.close()
    for headers, body, _, _ in found:
        Webhook(destination.SECRET).verify(body, headers)  # raises on a bad signature
    return found


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_every_event_arrives_once_with_its_bytes_key_and_a_verifiable_signature(
    request: pytest.FixtureRequest, db: str, kafka_broker: brokers.Broker
) -> None:
    topic = made_topic(kafka_broker)
    app = forwarding_app(request, db, {"bus": table(kafka_broker, topic)}, ["bus"])
    bodies = [bus_event(n) for n in range(EVENTS)]
    for body in bodies * COPIES:  # every event delivered three times by its provider
        assert post(app, body) == 200
    drain(app)
    settle_all(app)
    got = messages(kafka_broker, topic, EVENTS)
    assert len(got) == EVENTS
    assert sorted(body for _, body, _, _ in got) == sorted(bodies)  # the bytes as received, once each
    by_event = {headers["webhooks-event-id"]: (headers, body, key) for headers, body, key, _ in got}
    for n in range(EVENTS):
        headers, body, key = by_event[f"evt_{n}"]
        assert set(headers) == HEADERS
        assert body == bodies[n] and key == f"payment_intent/pi_{n}".encode()  # the object: its partition
        assert headers["webhook-id"] == message_id("stripe", f"evt_{n}", "bus")
        assert headers["content-type"] == "application/json"
    assert set(statuses(app).values()) == {"delivered"} and len(statuses(app)) == EVENTS
    answers = rows(app, "SELECT response, outcome FROM delivery_attempts")
    assert {outcome for _, outcome in answers} == {"delivered"}
    assert all(str(response).startswith(f"{topic} ") for response, _ in answers)  # topic partition offset


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_ordered_versions_arriving_shuffled_are_produced_in_increasing_order_on_one_partition(
    request: pytest.FixtureRequest, db: str, kafka_broker: brokers.Broker
) -> None:
    topic = made_topic(kafka_broker, partitions=4)
    app = forwarding_app(request, db, {"bus": table(kafka_broker, topic, ordered=True)}, ["bus"])
    base = 1_700_000_000
    with forwarding(app):
        for v in (2, 0, 4, 1, 3):
            assert post(app, versioned(f"evt_{v}", "pi_x", base + v)) == 200
            drain(app)  # the forwarder meets the versions in this order
        wait_settled(app, 5)
    found = statuses(app)
    delivered = sum(s == "delivered" for s in found.values())
    got = messages(kafka_broker, topic, delivered)
    versions = [int(headers["webhooks-object-version"]) for headers, _, _, _ in got]
    assert versions == sorted(set(versions)), versions  # strictly increasing
    assert len({partition for *_, partition in got}) == 1  # one object, one partition: Kafka keeps the order
    assert found["evt_4/bus"] == "delivered"
    assert len(versions) == delivered and set(found.values()) <= {"delivered", "superseded"}


@pytest.mark.slow
def test_a_traced_forward_carries_its_traceparent_header(
    request: pytest.FixtureRequest, kafka_broker: brokers.Broker
) -> None:
    topic = made_topic(kafka_broker, partitions=1)
    app = forwarding_app(request, "sqlite", {"bus": table(kafka_broker, topic, key="event_id")}, ["bus"])
    exporter = InMemorySpanExporter()
    tracing.setup(exporter=exporter)
    try:
        assert post(app, bus_event(5)) == 200
        drain(app)
        settle_all(app)
    finally:
        tracing.shutdown()
    [forward] = [s for s in exporter.get_finished_spans() if s.name == "forward"]
    assert forward.context is not None
    [(headers, body, key, _)] = messages(kafka_broker, topic, 1)
    assert set(headers) == {*HEADERS, "traceparent"} and body == bus_event(5) and key == b"evt_5"
    assert headers["traceparent"] == (
        f"00-{forward.context.trace_id:032x}-{forward.context.span_id:016x}-{forward.context.trace_flags:02x}"
    )


@pytest.mark.slow
def test_a_missing_topic_holds_the_delivery_pending_and_is_never_created(
    request: pytest.FixtureRequest, kafka_broker: brokers.Broker
) -> None:
    topic = f"missing-{uuid.uuid4().hex[:8]}"
    app = forwarding_app(request, "sqlite", {"bus": table(kafka_broker, topic, timeout_seconds=2)}, ["bus"])
    assert post(app, bus_event(2)) == 200
    drain(app)
    settle_all(app)
    assert statuses(app) == {"evt_2/bus": "pending"}
    [(error,)] = rows(app, "SELECT error FROM delivery_attempts")
    assert error.startswith(f"refused: topic {topic!r} does not exist"), error
    admin = AdminClient({"bootstrap.servers": kafka_broker.url})
    assert topic not in admin.list_topics(timeout=10).topics  # the producer never asked for it


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_kafka_killed_then_restarted_holds_deliveries_and_each_arrives_once(
    request: pytest.FixtureRequest, db: str
) -> None:
    with own_tansu() as server:
        topic = made_topic(server)
        dest = table(server, topic, retry_schedule=[0.3] * 50, probe_seconds=0.3, circuit_failures=5)
        app = forwarding_app(request, db, {"bus": dest | {"timeout_seconds": 2}}, ["bus"])
        with forwarding(app):
            assert post(app, bus_event(0)) == 200
            drain(app)
            wait_settled(app, 1)  # the producer is made and has written once
            server.kill()  # SIGKILL: no shutdown, no goodbye
            for n in range(1, 10):
                assert post(app, bus_event(n)) == 200
            drain(app)
            wait_until(lambda: len(rows(app, "SELECT 1 FROM delivery_attempts")) >= 10, timeout=90)
            retried_while_down(app)  # the circuit opened and its probes failed too: not a fixed sleep
            assert {s for k, s in statuses(app).items() if k != "evt_0/bus"} == {"pending"}
            errors = {str(r[0]) for r in rows(app, "SELECT error FROM delivery_attempts WHERE error IS NOT NULL")}
            assert all(e.startswith(("connect:", "timeout:")) for e in errors), errors
            server.start()  # the same port; memory only: the topic is made again, as an operator would
            server.create_topic(topic, 3)
            wait_settled(app, 10, timeout=120)
        got = messages(server, topic, 9)  # the restarted broker holds what came after it
        ids = [headers["webhook-id"] for headers, *_ in got]
        assert sorted(ids) == sorted(message_id("stripe", f"evt_{n}", "bus") for n in range(1, 10))  # once each
        assert sorted(body for _, body, _, _ in got) == sorted(bus_event(n) for n in range(1, 10))


@pytest.mark.slow
def test_a_broker_advertising_the_metadata_address_is_never_produced_to(request: pytest.FixtureRequest) -> None:
    """The attack: a broker the operator allowed (loopback, ``allow_private``) answers metadata naming
    the cloud metadata service as itself. librdkafka would connect there to produce; the publisher
    vets the advertised brokers first, refuses, and the delivery stays ``pending``."""
    with own_tansu(advertised=f"169.254.169.254:{servers.free_port()}") as server:
        app = forwarding_app(request, "sqlite", {"bus": table(server, "anything", timeout_seconds=2)}, ["bus"])
        assert post(app, bus_event(5)) == 200
        drain(app)
        settle_all(app)
        assert statuses(app) == {"evt_5/bus": "pending"}
        [(error,)] = rows(app, "SELECT error FROM delivery_attempts")
        assert error.startswith("refused: broker") and "169.254.169.254" in error, error
        assert "cloud metadata address" in error, error


@pytest.mark.slow
def test_a_private_advertised_broker_is_refused_without_allow_private() -> None:
    """The same check over a real broker's metadata naming a private address (10.x): refused unless
    the destination allows private addresses."""
    with own_tansu(advertised=f"10.9.8.7:{servers.free_port()}") as server:
        metadata = AdminClient({"bootstrap.servers": server.url}).list_topics(timeout=10)
        why = brokers_refused(metadata, allow_private=False, resolver=system_resolver)
        assert why is not None and "advertises 10.9.8.7" in why and "allow_private" in why, why
        assert brokers_refused(metadata, allow_private=True, resolver=system_resolver) is None


def bus_table(**extra: Any) -> dict[str, Any]:
    base = {"kind": "kafka", "bootstrap_servers": "127.0.0.1:9092", "topic": "t", "secrets": [destination.SECRET]}
    return {**base, "allow_private": True, **extra}


@pytest.mark.parametrize(
    ("table", "words"),
    [
        (bus_table(topic=None), ["topic is required for destination kind kafka"]),
        (bus_table(topic="a b"), ["topic 'a b' is not a Kafka topic name"]),
        (bus_table(bootstrap_servers=None), ["bootstrap_servers is required for destination kind kafka"]),
        (bus_table(bootstrap_servers="u:p@127.0.0.1:9092"), ["bootstrap_servers:", "is not host:port"]),
        (bus_table(bootstrap_servers="127.0.0.1:9092/x"), ["bootstrap_servers:", "is not host:port"]),
        (bus_table(bootstrap_servers=["127.0.0.1:1"] * 17), ["at most 16 brokers"]),
        (bus_table(allow_private=False), ["bootstrap_servers:", "127.0.0.1 is not a public address", "allow_private"]),
        (bus_table(bootstrap_servers="kafka.example:9092,10.0.0.1:9092", allow_private=False), ["bootstrap_servers:", "10.0.0.1"]),
        (bus_table(bootstrap_servers="169.254.169.254:9092"), ["cloud metadata address"]),
        (bus_table(key="customer"), ["key must be one of object, event_id, endpoint, type"]),
        (bus_table(security_protocol="SASL"), ["security_protocol must be one of PLAINTEXT, SSL"]),
        (bus_table(security_protocol="SASL_SSL", sasl_username="u"), ["needs sasl_username and sasl_password"]),
        (bus_table(security_protocol="SASL_SSL", sasl_mechanism="GSSAPI", sasl_username="u", sasl_password="p"), ["sasl_mechanism must be one of PLAIN, SCRAM-SHA-256"]),
        (bus_table(sasl_username="u", sasl_password="p"), ["sasl_* options need security_protocol = SASL_SSL"]),
        (bus_table(ssl_ca_location="/etc/ca.pem"), ["ssl_ca_location needs security_protocol = SSL"]),
        (bus_table(url="kafka://127.0.0.1:9092"), ["url is an option of destination kind"]),
        (bus_table(subject="x"), ["subject is an option of destination kind nats, not kafka"]),
    ],
)  # fmt: skip
def test_configuration_mistakes_stop_start_up_in_one_line(table: dict[str, Any], words: list[str]) -> None:
    message = refused(table)
    for word in words:
        assert word in message, message


def test_bootstrap_servers_list_and_sasl_password_shown_nowhere() -> None:
    bus = load_bus(
        bus_table(
            bootstrap_servers=["127.0.0.1", "[::1]:9093"],
            security_protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_username="svc",
            sasl_password="s3cret-pw",
        )
    ).destinations["bus"]
    assert (bus.kind, bus.target) == ("kafka", "kafka://127.0.0.1:9092,[::1]:9093")
    assert bus.bus is not None and bus.bus.place == "t"
    assert bus.bus.servers == (("127.0.0.1", 9092), ("::1", 9093))  # type: ignore[union-attr]
    assert "s3cret" not in repr(bus)


def test_a_silent_broker_never_holds_an_attempt_past_its_lease() -> None:
    """A bootstrap address that accepts and never answers (a broker hung, a firewall's black hole):
    eight attempts at once, each a failed attempt ending inside its own lease, none waiting on
    another's metadata read past its deadline (tests/forward/conftest.py: ``silent_attempts``)."""
    from webhooks.configuration import settings as webhooks_config
    from webhooks.forward.kafka import KafkaPublisher

    def publisher(port: int) -> KafkaPublisher:
        raw = bus_table(bootstrap_servers=f"127.0.0.1:{port}", timeout_seconds=1)
        return KafkaPublisher(webhooks_config.build_destination("bus", raw, {}), system_resolver)

    silent_attempts(publisher)
