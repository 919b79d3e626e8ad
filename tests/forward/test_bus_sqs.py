"""``kind = "sqs"`` against moto's server mode (the AWS API emulator) on a port of the suite's own:
every event arrives once as one SQS message with its original bytes, the ten attributes and a
signature the ``standardwebhooks`` SDK verifies; an ordered destination's versions arrive in
increasing order on a FIFO queue (the object as ``MessageGroupId``); a re-send within the FIFO
deduplication window is dropped by the queue; an endpoint that never answers is one request and a
timeout; bytes that are not UTF-8 text are a failed attempt, never altered; the emulator killed and
restarted holds the deliveries ``pending`` and each arrives once after; configuration mistakes stop
start-up with one line; credentials are shown nowhere."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from standardwebhooks.webhooks import Webhook

from tests.conftest import drain, rows, runtime, unavailable, wait_until
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
from webhooks import guard, tracing
from webhooks.configuration import settings as config
from webhooks.configuration.buses import Sqs
from webhooks.forward import deliveries, sqs
from webhooks.forward.leases import Lease
from webhooks.forward.signing import Message, message_id

REGION, KEY = "us-east-1", "testing"  # moto takes any credentials


def client(server: brokers.Broker) -> Any:
    return boto3.client(
        "sqs", endpoint_url=server.url, region_name=REGION, aws_access_key_id=KEY, aws_secret_access_key=KEY
    )


def made_queue(server: brokers.Broker, fifo: bool = False, name: str | None = None) -> str:
    """A new queue (FIFO: ``.fifo``, deduplication by the id sent): its URL."""
    name = name or f"q{uuid.uuid4().hex[:8]}" + (".fifo" if fifo else "")
    attributes = {"FifoQueue": "true"} if fifo else {}
    return str(client(server).create_queue(QueueName=name, Attributes=attributes)["QueueUrl"])


def table(endpoint: str, queue_url: str, **extra: Any) -> dict[str, Any]:
    """A ``[destinations.<name>]`` table for ``queue_url`` at ``endpoint`` (loopback: ``allow_private``)."""
    return {
        "kind": "sqs",
        "queue_url": queue_url,
        "region": REGION,
        "endpoint_url": endpoint,
        "access_key_id": KEY,
        "secret_access_key": KEY,
        "secrets": [destination.SECRET],
        "allow_private": True,
        **extra,
    }


def messages(server: brokers.Broker, queue_url: str) -> list[tuple[dict[str, str], bytes, dict[str, str]]]:
    """The queue's messages in the order received (each deleted once read, as a consumer does), as
    (message attributes, body, system attributes), each verified with the SDK."""
    sqs_client, found = client(server), []
    while True:
        got = sqs_client.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=10,
            MessageAttributeNames=["All"],
            AttributeNames=["All"],
            WaitTimeSeconds=0,
        ).get("Messages", [])
        if not got:
            break
        for message in got:
            attributes = {k: v["StringValue"] for k, v in message.get("MessageAttributes", {}).items()}
            found.append((attributes, message["Body"].encode(), message.get("Attributes", {})))
            sqs_client.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
    for attributes, body, _ in found:
        Webhook(destination.SECRET).verify(body, attributes)  # raises on a bad signature
    return found


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_every_event_arrives_once_with_its_bytes_and_a_verifiable_signature(
    request: pytest.FixtureRequest, db: str, moto_server: brokers.Broker
) -> None:
    queue = made_queue(moto_server)
    app = forwarding_app(request, db, {"bus": table(moto_server.url, queue)}, ["bus"])
    bodies = [bus_event(n) for n in range(EVENTS)]
    for body in bodies * COPIES:  # every event delivered three times by its provider
        assert post(app, body) == 200
    drain(app)
    settle_all(app)
    got = messages(moto_server, queue)
    assert len(got) == EVENTS
    assert sorted(body for _, body, _ in got) == sorted(bodies)  # the bytes as received, once each
    by_event = {attributes["webhooks-event-id"]: (attributes, body) for attributes, body, _ in got}
    for n in range(EVENTS):
        attributes, body = by_event[f"evt_{n}"]
        assert set(attributes) == HEADERS  # tracing is off: no traceparent
        assert body == bodies[n]
        assert attributes["webhook-id"] == message_id("stripe", f"evt_{n}", "bus")
        assert attributes["webhooks-object"] == f"payment_intent/pi_{n}"
        assert attributes["content-type"] == "application/json"
        assert attributes["webhooks-endpoint"] == "stripe"
        assert attributes["webhooks-event-type"] == "payment_intent.succeeded"
    assert set(statuses(app).values()) == {"delivered"} and len(statuses(app)) == EVENTS
    answers = rows(app, "SELECT response, outcome FROM delivery_attempts")
    assert {outcome for _, outcome in answers} == {"delivered"} and len(answers) == EVENTS
    assert len({response for response, _ in answers}) == EVENTS  # each attempt's answer: its MessageId


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_ordered_versions_arriving_shuffled_are_sent_in_increasing_order_to_a_fifo_queue(
    request: pytest.FixtureRequest, db: str, moto_server: brokers.Broker
) -> None:
    queue = made_queue(moto_server, fifo=True)
    app = forwarding_app(request, db, {"bus": table(moto_server.url, queue, ordered=True)}, ["bus"])
    base = 1_700_000_000
    with forwarding(app):
        for v in (2, 0, 4, 1, 3):
            assert post(app, versioned(f"evt_{v}", "pi_x", base + v)) == 200
            drain(app)  # the forwarder meets the versions in this order
        wait_settled(app, 5)
    got = messages(moto_server, queue)
    versions = [int(attributes["webhooks-object-version"]) for attributes, _, _ in got]
    assert versions == sorted(set(versions)), versions  # strictly increasing
    for attributes, _, system in got:
        assert system["MessageGroupId"] == "payment_intent/pi_x"
        assert system["MessageDeduplicationId"] == attributes["webhook-id"]
    found = statuses(app)
    assert found["evt_4/bus"] == "delivered"
    assert len(versions) == sum(s == "delivered" for s in found.values())
    assert set(found.values()) <= {"delivered", "superseded"}


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_a_resend_within_the_fifo_deduplication_window_is_dropped_by_the_queue(
    request: pytest.FixtureRequest, db: str, moto_server: brokers.Broker
) -> None:
    queue = made_queue(moto_server, fifo=True)
    app = forwarding_app(request, db, {"bus": table(moto_server.url, queue)}, ["bus"])
    assert post(app, bus_event(1)) == 200
    drain(app)
    settle_all(app)
    with runtime(app).sessions.begin() as session:  # an operator's re-send: the same webhook-id
        assert len(deliveries.replay(session, [("stripe", "evt_1")], "bus", datetime.now(UTC))) == 1
    settle_all(app)
    assert statuses(app) == {"evt_1/bus": "delivered"}
    assert [r[0] for r in rows(app, "SELECT outcome FROM delivery_attempts")] == ["delivered", "delivered"]
    [(attributes, body, _)] = messages(moto_server, queue)  # SQS kept the first
    assert body == bus_event(1) and attributes["webhook-id"] == message_id("stripe", "evt_1", "bus")


@pytest.mark.slow
def test_a_traced_forward_sends_exactly_ten_attributes_the_tenth_its_traceparent(
    request: pytest.FixtureRequest, moto_server: brokers.Broker
) -> None:
    queue = made_queue(moto_server)
    app = forwarding_app(request, "sqlite", {"bus": table(moto_server.url, queue)}, ["bus"])
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
    [(attributes, body, _)] = messages(moto_server, queue)
    assert set(attributes) == {*HEADERS, "traceparent"} and body == bus_event(5)  # ten: SQS's most
    assert attributes["traceparent"] == (
        f"00-{forward.context.trace_id:032x}-{forward.context.span_id:016x}-{forward.context.trace_flags:02x}"
    )


@pytest.mark.slow
def test_a_missing_queue_is_a_failed_attempt_and_waits_pending(
    request: pytest.FixtureRequest, moto_server: brokers.Broker
) -> None:
    queue = f"{moto_server.url}/123456789012/nowhere"
    app = forwarding_app(request, "sqlite", {"bus": table(moto_server.url, queue)}, ["bus"])
    assert post(app, bus_event(2)) == 200
    drain(app)
    settle_all(app)
    assert statuses(app) == {"evt_2/bus": "pending"}
    [(error,)] = rows(app, "SELECT error FROM delivery_attempts")
    assert error.startswith("refused: ") and "NonExistentQueue" in error and error.endswith(queue), error


def test_an_endpoint_that_never_answers_is_one_request_and_a_timeout_within_the_lease(
    request: pytest.FixtureRequest,
) -> None:
    """botocore does not retry: one request, then the attempt ends after ``timeout_seconds``."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept() -> None:  # takes connections, never answers
        with contextlib.suppress(OSError):
            while True:
                accepted.append(listener.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    endpoint = f"http://127.0.0.1:{listener.getsockname()[1]}"
    dest = table(endpoint, f"{endpoint}/123456789012/q", timeout_seconds=1, retry_schedule=[600])
    app = forwarding_app(request, "sqlite", {"bus": dest}, ["bus"])
    try:
        assert post(app, bus_event(7)) == 200
        drain(app)
        settle_all(app)
    finally:
        listener.close()
        for line in accepted:
            line.close()
    [(error, seconds)] = rows(app, "SELECT error, seconds FROM delivery_attempts")
    assert error == f"timeout: no answer within 1 s: {endpoint}/123456789012/q", error
    assert 1 <= seconds < 2 * 1 + 5  # inside the lease: twice the timeout plus its margin
    assert len(accepted) == 1  # no retry by botocore
    assert statuses(app) == {"evt_7/bus": "pending"}


def test_bytes_that_are_not_utf8_text_are_a_failed_attempt_saying_so() -> None:
    settings = load_bus(bus_table())
    publisher = sqs.SqsPublisher(settings.destinations["bus"], lambda host, port: [])
    message = Message("msg_1", "stripe", "evt_1", "t", None, None, None, "application/json")
    lease = Lease("stripe", "evt_1", "bus", 1, 0, False, message, b'{"a": "\xff"}')
    result = publisher.publish(lease, {"webhook-id": "msg_1"}, datetime.now(UTC))
    assert not result.delivered and publisher.client is None  # refused before any request
    assert result.error == "refused: the event's bytes are not UTF-8 text an SQS message body can hold: " + (
        "http://127.0.0.1:4566/123456789012/q"
    )


def test_only_utf8_text_sqs_takes_is_a_message_body() -> None:
    assert sqs.text('{"name": "Zoë 🧾"}'.encode()) == '{"name": "Zoë 🧾"}'
    assert sqs.text(b"a\tb\r\n") == "a\tb\r\n"
    assert sqs.text(b'{"a": "\xff"}') is None  # not UTF-8: never altered to fit, a failed attempt
    assert sqs.text(b"a\x00b") is None  # a character SQS refuses in a body


@pytest.mark.slow
@pytest.mark.parametrize("db", ["postgres"])
def test_the_emulator_killed_then_restarted_holds_deliveries_and_each_arrives_once(
    request: pytest.FixtureRequest, db: str
) -> None:
    try:
        server = brokers.MotoServer()
        server.start()
    except servers.Unavailable as exc:
        unavailable("moto (SQS)", exc)
    try:
        name = f"q{uuid.uuid4().hex[:8]}"
        queue = made_queue(server, name=name)
        dest = table(server.url, queue, retry_schedule=[0.3] * 50, probe_seconds=0.3, circuit_failures=5)
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
            server.start()  # the same port; moto keeps its state in memory, so the queue is gone:
            assert made_queue(server, name=name) == queue  # made again (a send before this is refused: held too)
            wait_settled(app, 10, timeout=120)
        got = messages(server, queue)
        ids = [attributes["webhook-id"] for attributes, _, _ in got]
        assert sorted(ids) == sorted(message_id("stripe", f"evt_{n}", "bus") for n in range(10))  # once each
        assert sorted(body for _, body, _ in got) == sorted(bus_event(n) for n in range(10))
    finally:
        server.remove()


def bus_table(**extra: Any) -> dict[str, Any]:
    base = {"kind": "sqs", "queue_url": "http://127.0.0.1:4566/123456789012/q", "region": REGION}
    return {**base, "secrets": [destination.SECRET], "allow_private": True, **extra}


@pytest.mark.parametrize(
    ("table", "words"),
    [
        (bus_table(queue_url=None), ["queue_url is required"]),
        (bus_table(ordered=True), ["ordered = true needs a FIFO queue, whose queue_url ends in .fifo"]),
        (bus_table(queue=1), ["unknown key 'queue'"]),
        (bus_table(region=None), ["region is required for destination kind sqs"]),
        (bus_table(queue_url="http://127.0.0.1:4566/q"), ["queue_url:", "https://<endpoint>/<account>/<queue>"]),
        (bus_table(queue_url="amqp://127.0.0.1/1/q"), ["queue_url:", "amqp"]),
        (bus_table(allow_private=False), ["queue_url:", "127.0.0.1 is not a public address", "allow_private"]),
        (
            bus_table(queue_url="https://sqs.us-east-1.amazonaws.com/1/q", endpoint_url="http://10.0.0.5:4566", allow_private=False),
            ["endpoint_url:", "10.0.0.5 is not a public address"],
        ),
        (bus_table(access_key_id="AKIA"), ["access_key_id and secret_access_key go together"]),
        (bus_table(url="http://127.0.0.1:4566"), ["url is an option of destination kind http, not sqs"]),
        (bus_table(stream="s"), ["stream is an option of destination kind redis-stream, not sqs"]),
    ],
)  # fmt: skip
def test_configuration_mistakes_stop_start_up_in_one_line(table: dict[str, Any], words: list[str]) -> None:
    message = refused(table)
    for word in words:
        assert word in message, message


def test_credentials_are_env_values_and_shown_nowhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WH_TEST_SQS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setenv("WH_TEST_SQS_SECRET", "s3cret-key")
    fifo = "https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo"
    options = {"access_key_id": "env:WH_TEST_SQS_KEY_ID", "secret_access_key": "env:WH_TEST_SQS_SECRET"}
    bus = load_bus(bus_table(queue_url=fifo, region="eu-west-1", ordered=True, **options)).destinations["bus"]
    assert (bus.kind, bus.target, bus.url) == ("sqs", fifo, fifo)
    assert isinstance(bus.bus, Sqs) and bus.bus.fifo and bus.bus.place == fifo
    assert (bus.bus.access_key_id, bus.bus.secret_access_key) == ("AKIAEXAMPLE", "s3cret-key")
    assert "s3cret" not in repr(bus) and "AKIAEXAMPLE" not in repr(bus)
    assert "WH_TEST_SQS_UNSET" in refused(bus_table(access_key_id="env:WH_TEST_SQS_UNSET", secret_access_key="x"))


def test_the_documented_example_starts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    page = Path(__file__).resolve().parents[2] / "docs" / "buses" / "sqs.md"
    [toml] = re.findall(r"```toml\n(.*?)```", page.read_text(), re.S)
    monkeypatch.setattr(guard, "system_resolver", lambda host, port: [])  # no DNS traffic: checked when sending
    (tmp_path / "webhooks.toml").write_text(toml)
    environ = {name: f"value-of-{name}" for name in re.findall(r'"env:(\w+)"', toml)}
    environ["PAYMENTS_BUS_SECRET"] = destination.SECRET
    settings = config.load({"DATABASE_URL": "sqlite://", "WEBHOOKS_CONFIG": str(tmp_path / "webhooks.toml"), **environ})
    bus = settings.destinations["payments-sqs"]
    assert (bus.kind, bus.ordered, bus.target) == (
        "sqs",
        True,
        "https://sqs.eu-west-1.amazonaws.com/123456789012/payments.fifo",
    )
