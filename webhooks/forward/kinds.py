"""The sender of each destination kind, behind one interface, so that every kind shares the rest of
forwarding (the deliveries and their states, retries, the circuit, pause and resume, order, replay).

A ``Publisher`` takes one lease and the signed headers (``signing.headers``) and says what came of
it as a ``Result``: delivered (a 2xx, or a bus's acknowledgement), or why not. It never raises for
the destination's sake (a broker or service that is down is a failed attempt); ``Lane`` turns a bug
into a failed attempt too. ``PUBLISHERS`` is the registry: kind → how to build its sender, one for
each kind ``webhooks.configuration.destinations.KINDS`` accepts.

- ``http``: a POST over a connection the guard vetted (``client.Sender``); ``Retry-After`` kept.
- ``redis-stream``: ``XADD`` (``redis_stream.RedisStreamPublisher``).
- ``rabbitmq``: a confirmed, mandatory ``basic.publish`` (``rabbitmq.RabbitMQPublisher``).
- ``nats``: a JetStream publish, its ack awaited (``jetstream.NatsPublisher``).
- ``sqs``: a ``SendMessage``, its answer awaited (``sqs.SqsPublisher``).
- ``kafka``: an idempotent ``acks = all`` produce, its acknowledgement awaited (``kafka.KafkaPublisher``).
"""

from __future__ import annotations

import email.utils
import importlib
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Protocol

from webhooks.configuration.destinations import Destination
from webhooks.forward import client
from webhooks.forward.leases import Lease, Result
from webhooks.guard import Resolver


class Publisher(Protocol):
    def publish(self, lease: Lease, headers: Mapping[str, str], started_at: datetime) -> Result: ...

    def close(self) -> None: ...


def retry_after(value: str | None, now: float) -> float | None:
    """A ``Retry-After``'s seconds: a number, or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now) if when.tzinfo else None


class HttpPublisher:
    """``kind = "http"``: the signed POST; any HTTP status is a result, no answer an error."""

    def __init__(self, destination: Destination, resolver: Resolver) -> None:
        self.sender = client.Sender(
            destination.url,
            timeout=destination.timeout_seconds,
            allow_private=destination.allow_private,
            resolver=resolver,
        )

    def publish(self, lease: Lease, headers: Mapping[str, str], started_at: datetime) -> Result:
        clock = time.monotonic()
        try:
            answer = self.sender.post(lease.body, headers)
        except client.SendError as exc:
            return Result(lease, started_at, time.monotonic() - clock, None, f"{exc.reason}: {exc}")
        wait = retry_after(answer.headers.get("retry-after"), time.time())
        text = answer.body.decode("utf-8", "replace")
        return Result(lease, started_at, answer.seconds, answer.status, None, wait, text)

    def close(self) -> None:
        self.sender.close()


def _imported(module: str, name: str) -> Callable[[Destination, Resolver], Publisher]:
    """A bus's publisher, its module (and the broker's client library: pika, nats-py, botocore, confluent-kafka)
    imported when a destination of its kind is first built: a process with no bus destination
    never pays for one (``create_app`` imported all three: about 0.9 s)."""

    def build(destination: Destination, resolver: Resolver) -> Publisher:
        found: Callable[[Destination, Resolver], Publisher] = getattr(
            importlib.import_module(f"webhooks.forward.{module}"), name
        )
        return found(destination, resolver)

    return build


PUBLISHERS: dict[str, Callable[[Destination, Resolver], Publisher]] = {
    "http": HttpPublisher,
    "redis-stream": _imported("redis_stream", "RedisStreamPublisher"),
    "rabbitmq": _imported("rabbitmq", "RabbitMQPublisher"),
    "nats": _imported("jetstream", "NatsPublisher"),
    "sqs": _imported("sqs", "SqsPublisher"),
    "kafka": _imported("kafka", "KafkaPublisher"),
}


def publisher(destination: Destination, resolver: Resolver) -> Publisher:
    """The sender of ``destination``'s kind (every kind ``configuration.destinations.KINDS`` accepts has one)."""
    return PUBLISHERS[destination.kind](destination, resolver)
