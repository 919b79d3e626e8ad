"""Bus destinations in the real processes, for each kind (RabbitMQ, NATS JetStream, Redis Streams,
SQS, Kafka): under ``webhooks serve`` (SQLite, its embedded worker) 20 events posted 3 times each arrive
once each with their original bytes and a verifiable signature, and a broker killed then restarted
holds the deliveries ``pending`` until each arrives once; on PostgreSQL + Redis a ``webhooks worker``
SIGKILLed after its publish reached the broker and before the broker's ack ends ``delivered``, the
consumer seeing the event at most twice under one ``webhook-id`` (JetStream and SQS FIFO: once).

The per-kind configuration and consumers are the bus test modules' own."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
import pytest
import redis
import requests
import sqlalchemy as sa

from tests.conftest import (
    STRIPE_SECRET,
    base_config,
    free_port,
    make_app,
    rows,
    stripe_headers,
    unavailable,
    wait_until,
)
from tests.faults.conftest import Proc, processes, worker
from tests.forward import test_bus_kafka as kafka_bus
from tests.forward import test_bus_nats as nats_bus
from tests.forward import test_bus_rabbitmq as rabbitmq_bus
from tests.forward import test_bus_redis_stream as redis_bus
from tests.forward import test_bus_sqs as sqs_bus
from tests.forward.conftest import COPIES, EVENTS, bus_event, post, statuses
from tests.support import brokers, servers
from tests.support.processes import BIN, clean_env, running, wait_http
from webhooks.forward.signing import message_id

pytestmark = pytest.mark.slow

KINDS = ["rabbitmq", "nats", "redis-stream", "sqs", "kafka"]
Server = brokers.Broker | servers.Redis
Message = tuple[dict[str, str], bytes]  # (headers, body), verified with the standardwebhooks SDK


@dataclass
class Bus:
    """One kind's broker with a fresh target on it: the destination table, the consumer's read (every
    message, each verified), and what a restarted broker needs before it takes messages again."""

    server: Server
    table: dict[str, Any]
    read: Callable[[], list[Message]]
    count: Callable[[], int]  # the messages the target holds, read without consuming them
    after_restart: Callable[[], None] = field(default=lambda: None)


def target(kind: str, server: Server, fifo: bool = False) -> Bus:
    """A new exchange + queue, stream, stream key or queue on ``server`` for ``kind``."""
    if kind == "rabbitmq":
        assert isinstance(server, brokers.Broker)
        exchange = f"ex-{uuid.uuid4().hex[:8]}"
        queue = rabbitmq_bus.bound(server, exchange)

        def held() -> int:
            [count] = [
                ch.queue_declare(queue, passive=True).method.message_count for ch in rabbitmq_bus.channel(server)
            ]
            return int(count)

        return Bus(
            server,
            rabbitmq_bus.table(server, exchange),
            lambda: [(h, b) for h, b, _ in rabbitmq_bus.messages(server, queue)],
            held,
        )
    if kind == "nats":
        assert isinstance(server, brokers.Broker)
        stream, subject = nats_bus.made_stream(server)

        def stored() -> int:
            async def info() -> int:
                client = await nats.connect(server.url)
                try:
                    return int((await client.jetstream().stream_info(stream)).state.messages)
                finally:
                    await client.close()

            return asyncio.run(info())

        return Bus(server, nats_bus.table(server, subject, stream), lambda: nats_bus.messages(server, stream), stored)
    if kind == "redis-stream":
        assert isinstance(server, servers.Redis)
        key = f"events-{uuid.uuid4().hex[:8]}"

        def entries() -> list[Message]:
            got = redis_bus.entries(server, key)
            return [({k: v.decode() for k, v in e.items() if k != "body"}, e["body"]) for e in got]

        def length() -> int:
            client = redis.Redis(port=server.port)
            try:
                return int(client.xlen(key))
            finally:
                client.close()

        return Bus(server, redis_bus.table(server, key), entries, length)
    if kind == "kafka":
        assert isinstance(server, brokers.Tansu)
        topic = kafka_bus.made_topic(server)

        def consumed() -> list[Message]:
            return [(h, b) for h, b, _, _ in kafka_bus.messages(server, topic, kafka_bus.held(server, topic))]

        return Bus(
            server,
            kafka_bus.table(server, topic),
            consumed,
            lambda: kafka_bus.held(server, topic),
            lambda: server.create_topic(topic, 3),  # memory only: a restart loses the topic
        )
    assert kind == "sqs" and isinstance(server, brokers.Broker)
    name = f"q{uuid.uuid4().hex[:8]}" + (".fifo" if fifo else "")
    queue = sqs_bus.made_queue(server, fifo=fifo, name=name)

    def remade() -> None:  # moto keeps its queues in memory: a restart loses them
        assert sqs_bus.made_queue(server, fifo=fifo, name=name) == queue

    def queued() -> int:
        answer = sqs_bus.client(server).get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])
        attributes = answer["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"]) + int(attributes["ApproximateNumberOfMessagesNotVisible"])

    return Bus(
        server,
        sqs_bus.table(server.url, queue),
        lambda: [(a, b) for a, b, _ in sqs_bus.messages(server, queue)],
        queued,
        remade,
    )


@contextlib.contextmanager
def own_broker(kind: str) -> Iterator[Server]:
    """A broker of this test's own (one it may kill, freeze or restart), removed at the end."""
    make: dict[str, Callable[[], Server]] = {
        "rabbitmq": brokers.RabbitMQ,
        "nats": brokers.NatsServer,
        "redis-stream": servers.Redis,
        "sqs": brokers.MotoServer,
        "kafka": brokers.Tansu,
    }
    try:
        server = make[kind]()
        server.start()
    except servers.Unavailable as exc:
        unavailable(kind, exc)
    try:
        yield server
    finally:
        if server.proc is not None and server.proc.poll() is None:
            os.kill(server.proc.pid, signal.SIGCONT)  # never left frozen
        server.remove()


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    assert isinstance(value, list | tuple), value
    return "[" + ", ".join(toml_value(v) for v in value) + "]"


def write_config(path: Path, table: dict[str, Any]) -> Path:
    """A ``webhooks.toml``: the stripe endpoint (its secret from the environment) forwarding to ``bus`` = ``table``."""
    options = "".join(f"{k} = {toml_value(v)}\n" for k, v in table.items())
    path.write_text(
        '[endpoints.stripe]\nprovider = "stripe"\nsecrets = ["env:STRIPE_WEBHOOK_SECRET"]\nforward = ["bus"]\n\n'
        f"[destinations.bus]\n{options}"
    )
    return path


@contextlib.contextmanager
def serve(tmp: Path, table: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """``webhooks serve`` in ``tmp`` (its SQLite file there) forwarding to ``table``: (base URL, database URL)."""
    config = write_config(tmp / "webhooks.toml", table)
    env = clean_env(WEBHOOKS_CONFIG=str(config), STRIPE_WEBHOOK_SECRET=STRIPE_SECRET, WEBHOOKS_LOG_LEVEL="WARNING")
    port = free_port()
    with running([str(BIN / "webhooks"), "serve", "--port", str(port)], env, cwd=tmp) as proc:
        threading.Thread(target=proc.stdout.read, daemon=True).start()  # type: ignore[union-attr]
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/")
        yield base, f"sqlite:///{tmp / 'webhooks.db'}"


def send(base: str, body: bytes) -> None:
    answer = requests.post(f"{base}/webhooks/stripe", data=body, headers=stripe_headers(body), timeout=60)
    assert answer.status_code == 200, answer.text


def query(url: str, sql: str) -> list[tuple[Any, ...]]:
    """``sql``'s rows from the database at ``url``, read beside the service (a fresh engine each time)."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(sa.text(sql))]
    finally:
        engine.dispose()


def delivery_states(url: str) -> dict[str, str]:
    with contextlib.suppress(sa.exc.OperationalError):  # the file not created yet, or busy
        return {str(e): str(s) for e, s in query(url, "SELECT event_id, status FROM deliveries")}
    return {}


def all_delivered(url: str, count: int) -> bool:
    found = delivery_states(url)
    return len(found) == count and set(found.values()) == {"delivered"}


def assert_once_each(got: list[Message], bodies: dict[str, bytes]) -> None:
    """Each event of ``bodies`` (event id → bytes) arrived exactly once, unchanged, under its webhook-id."""
    ids = Counter(h["webhook-id"] for h, _ in got)
    assert ids == {message_id("stripe", e, "bus"): 1 for e in bodies}, ids
    for headers, body in got:
        event = headers["webhooks-event-id"]
        assert body == bodies[event] and headers["webhook-id"] == message_id("stripe", event, "bus")


@pytest.fixture
def session_broker(request: pytest.FixtureRequest) -> Iterator[Server]:
    """The session's broker of the test's kind (Redis Streams: a redis-server of the test's own)."""
    kind = request.node.callspec.params["kind"]
    if kind == "redis-stream":
        with own_broker(kind) as server:
            yield server
        return
    fixtures = {"rabbitmq": "rabbitmq", "nats": "nats_server", "sqs": "moto_server", "kafka": "kafka_broker"}
    yield request.getfixturevalue(fixtures[kind])


@pytest.mark.parametrize("kind", KINDS)
def test_webhooks_serve_delivers_every_event_once_with_its_bytes_and_a_verifiable_signature(
    kind: str, session_broker: Server, tmp_path: Path
) -> None:
    bus = target(kind, session_broker)
    bodies = {f"evt_{n}": bus_event(n) for n in range(EVENTS)}
    with serve(tmp_path, bus.table) as (base, db):
        for body in list(bodies.values()) * COPIES:  # every event delivered three times by its provider
            send(base, body)
        wait_until(lambda: all_delivered(db, EVENTS), timeout=120, interval=0.2)
    assert_once_each(bus.read(), bodies)  # read verifies each signature with the standardwebhooks SDK
    assert {o for (o,) in query(db, "SELECT outcome FROM delivery_attempts")} == {"delivered"}


@pytest.mark.parametrize("kind", KINDS)
def test_webhooks_serve_holds_deliveries_while_the_broker_is_down_and_each_arrives_once_after(
    kind: str, tmp_path: Path
) -> None:
    with own_broker(kind) as server:
        bus = target(kind, server)
        table = bus.table | {"retry_schedule": [0.3] * 50, "probe_seconds": 0.3, "circuit_failures": 5}
        bodies = {f"evt_{n}": bus_event(n) for n in range(10)}
        with serve(tmp_path, table | {"timeout_seconds": 2}) as (base, db):
            assert server.proc is not None
            os.kill(server.proc.pid, signal.SIGKILL)  # no shutdown, no goodbye
            server.proc.wait()
            down = time.monotonic()
            for body in bodies.values():
                send(base, body)
            wait_until(lambda: len(query(db, "SELECT 1 FROM delivery_attempts")) >= 10, timeout=90, interval=0.2)
            time.sleep(max(0.0, down + 10 - time.monotonic()))  # down ~10 s: retried on the schedule, probed
            assert set(delivery_states(db).values()) == {"pending"} and len(delivery_states(db)) == 10
            errors = {str(e) for (e,) in query(db, "SELECT error FROM delivery_attempts")}
            assert all(e.startswith(("connect:", "timeout:")) for e in errors), errors
            outcomes = {str(o) for (o,) in query(db, "SELECT outcome FROM delivery_attempts")}
            assert outcomes <= {"error", "probe_failed"}, outcomes
            server.stop()  # reaps what the killed process left; the restart is on the same port and data
            server.start()
            bus.after_restart()
            wait_until(lambda: all_delivered(db, 10), timeout=180, interval=0.2)  # the circuit's probe backs off
        assert_once_each(bus.read(), bodies)  # any re-send kept its webhook-id: none arrived twice


def receive_queue_bytes(port: int) -> int:
    """Bytes waiting, unread, in the receive buffers of the connections to local TCP ``port`` (the
    kernel's count: a frozen broker's sockets still receive)."""
    waiting = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state, queues = fields[1], fields[3], fields[4]
        if int(local.split(":")[1], 16) == port and state == "01":  # ESTABLISHED, the broker's side
            waiting += int(queues.split(":")[1], 16)
    return waiting


def start_worker(pg_url: str, redis_url: str, config: Path, tmp: Path, name: str) -> Proc:
    env = clean_env(
        DATABASE_URL=pg_url,
        REDIS_URL=redis_url,
        WEBHOOKS_CONFIG=str(config),
        STRIPE_WEBHOOK_SECRET=STRIPE_SECRET,
        WEBHOOKS_LOG_LEVEL="WARNING",
    )
    return worker(env, tmp, name)


@pytest.mark.parametrize("kind", KINDS)
def test_a_worker_killed_between_publish_and_ack_ends_delivered_under_one_webhook_id(
    kind: str, pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    """The broker is frozen (SIGSTOP) before the event is posted: the worker's publish reaches the
    broker's socket (the kernel's receive queue grows) and no ack can come; the worker is SIGKILLed,
    the broker thawed (it takes the publish, its ack goes to a dead connection), and a new worker sends
    the delivery again once the lease (twice the timeout plus 5 s) is over."""
    with own_broker(kind) as server, processes() as procs:
        bus = target(kind, server, fifo=True)  # SQS: a FIFO queue, deduplicating by webhook-id
        config = write_config(tmp_path / "webhooks.toml", bus.table | {"timeout_seconds": 2, "retry_schedule": [0.3]})
        app = make_app(base_config(pg_url, REDIS_URL=redis_url, WEBHOOKS_CONFIG=str(config)))
        first = start_worker(pg_url, redis_url, config, tmp_path, "first")
        procs.append(first)
        assert post(app, bus_event(1)) == 200  # the worker's connection to the broker is open and used
        wait_until(lambda: statuses(app) == {"evt_1/bus": "delivered"}, timeout=90, interval=0.1)
        assert server.proc is not None
        wait_until(lambda: receive_queue_bytes(server.port) == 0, timeout=30)
        os.kill(server.proc.pid, signal.SIGSTOP)
        try:
            assert post(app, bus_event(2)) == 200
            # Published: more bytes wait than the body alone (a heartbeat or PING is a few bytes).
            wait_until(lambda: receive_queue_bytes(server.port) > len(bus_event(2)), timeout=30, interval=0.01)
            first.signal(signal.SIGKILL)  # within its 2 s timeout: no result recorded
            first.popen.wait(30)
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        wait_until(lambda: bus.count() == 2, timeout=30, interval=0.1)  # the killed worker's publish landed
        assert rows(app, "SELECT count(*) FROM delivery_attempts WHERE event_id = 'evt_2'")[0][0] == 0, first.tail()
        assert statuses(app)["evt_2/bus"] == "pending"
        second = start_worker(pg_url, redis_url, config, tmp_path, "second")
        procs.append(second)
        wait_until(lambda: statuses(app).get("evt_2/bus") == "delivered", timeout=90, interval=0.1)
        got = bus.read()
    sent = message_id("stripe", "evt_2", "bus")
    crashed = [(h, b) for h, b in got if h["webhooks-event-id"] == "evt_2"]
    assert {h["webhook-id"] for h, _ in crashed} == {sent} and {b for _, b in crashed} == {bus_event(2)}
    dedup = kind in ("nats", "sqs")  # Nats-Msg-Id, MessageDeduplicationId: the server drops the repeat
    assert len(crashed) == (1 if dedup else 2), len(crashed)  # the repeat dropped, or seen under the same id
    [(outcome, response)] = rows(app, "SELECT outcome, response FROM delivery_attempts WHERE event_id = 'evt_2'")
    assert outcome == "delivered"  # the killed publish left no attempt: the re-send is the one
    if kind == "nats":
        assert str(response).endswith(" duplicate"), response  # JetStream's ack says it kept the first
