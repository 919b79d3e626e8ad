"""``kind = "kafka"``: each delivery is one message produced to the destination's topic, the broker's
acknowledgement awaited (confluent-kafka: librdkafka).

The message's value is the event's bytes, unchanged; its headers are the HTTP forward's headers
named in lower case (``content-type``, ``webhook-id``, ``webhook-timestamp``, ``webhook-signature``,
``webhooks-endpoint``, ``webhooks-event-id``, ``webhooks-event-type``, ``webhooks-object``,
``webhooks-object-version``, and ``traceparent`` when the forward is traced; not ``idempotency-key``,
the same value as ``webhook-id``). Its key is the destination's ``key``: by default the object
(``type/id``; the event id when there is none), so that one object's versions share a partition and
Kafka keeps their order.

The producer is idempotent with ``acks = all`` (a retry inside librdkafka never writes twice) and
never asks the broker to create a topic. Delivered means the broker acknowledged the write (the
attempt's answer is ``topic partition offset``). A broker down, a topic missing, a refusal or no
acknowledgement within ``timeout_seconds`` is a failed attempt: the delivery stays ``pending``,
retried on the destination's schedule under the same ``webhook-id``, which is how a consumer drops
the copy a lost acknowledgement leaves.

The address guard: the bootstrap brokers are vetted (``guard.vet``) when the producer is made, and
without TLS the producer is given the addresses vetted, not the names. librdkafka then connects to the
brokers the cluster's metadata advertises, and offers no hook at connect time; so before a produce,
at least once every ``METADATA_SECONDS`` (librdkafka's own refresh interval is set to the same), the
publisher reads the metadata itself and vets every advertised broker: one the guard refuses fails the
attempt and closes the producer before it produces. What is left is the window between that check
and librdkafka's own next refresh (at most ``METADATA_SECONDS``), documented in ``docs/buses/kafka.md``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import confluent_kafka
from confluent_kafka.admin._metadata import ClusterMetadata

from webhooks.configuration.buses import Kafka
from webhooks.configuration.destinations import Destination
from webhooks.forward.leases import Lease, Result
from webhooks.guard import Refused, Resolver, resolve_within, vet

SKIPPED = ("idempotency-key",)  # the same value as webhook-id
METADATA_SECONDS = 30.0
LOST = (  # a broker lost: the producer is made again (``KafkaPublisher._renew``)
    confluent_kafka.KafkaError._MSG_TIMED_OUT,
    confluent_kafka.KafkaError._TIMED_OUT,
    confluent_kafka.KafkaError._TRANSPORT,
    confluent_kafka.KafkaError._ALL_BROKERS_DOWN,
)  # how often the advertised brokers are vetted (and librdkafka refreshes)


def brokers_refused(metadata: ClusterMetadata, *, allow_private: bool, resolver: Resolver) -> str | None:
    """Why the guard refuses a broker the cluster's metadata advertises, or None when it takes all."""
    for broker in sorted(metadata.brokers.values(), key=lambda b: b.id):
        try:
            vet(str(broker.host or ""), broker.port, allow_private=allow_private, resolver=resolver)
        except Refused as exc:
            return f"broker {broker.id} advertises {broker.host}:{broker.port}: {exc}"
    return None


def message_key(options: Kafka, lease: Lease, fields: Mapping[str, str]) -> str:
    """A message's key, as the destination's ``key`` says."""
    if options.key == "event_id":
        return lease.event_id
    if options.key == "endpoint":
        return lease.endpoint
    if options.key == "type":
        return fields.get("webhooks-event-type") or lease.event_id
    return fields.get("webhooks-object") or lease.event_id


class KafkaPublisher:
    """Produces to one topic through one idempotent producer (thread-safe), made at the first send
    and made again after a fatal error (a broker that lost the producer's state, say)."""

    def __init__(self, destination: Destination, resolver: Resolver) -> None:
        assert isinstance(destination.bus, Kafka)
        self.options = destination.bus
        self.destination = destination
        self.target = destination.target
        self.timeout = destination.timeout_seconds
        self.resolver = resolve_within(resolver, destination.timeout_seconds)
        self.producer: confluent_kafka.Producer | None = None
        self.vetted_at = float("-inf")  # when the advertised brokers were last vetted
        self.stop = threading.Event()  # the producer's poller's (``_serve``)
        self.lock = threading.Lock()

    def _config(self) -> dict[str, Any]:
        servers = []
        for host, port in self.options.servers:
            addresses = vet(host, port, allow_private=self.destination.allow_private, resolver=self.resolver)
            if self.options.tls:  # the certificate is checked against the name: librdkafka resolves it
                servers.append(f"{host}:{port}")
            else:
                servers.extend(f"[{a}]:{port}" if ":" in a else f"{a}:{port}" for a in addresses)
        milliseconds = max(1, round(self.timeout * 1000))
        config: dict[str, Any] = {
            "bootstrap.servers": ",".join(servers),
            "client.id": f"webhooks-{self.destination.name}",
            "acks": "all",
            "enable.idempotence": True,
            "allow.auto.create.topics": False,
            "linger.ms": 0,
            "message.timeout.ms": milliseconds,
            "socket.timeout.ms": max(10, milliseconds),
            "socket.connection.setup.timeout.ms": max(1000, milliseconds),
            "topic.metadata.refresh.interval.ms": round(METADATA_SECONDS * 1000),
            "reconnect.backoff.max.ms": 1000,  # a broker back is written to within a second or so
            "security.protocol": self.options.security_protocol,
            "error_cb": lambda error: None,  # the attempt's own error says what failed; no log line per loss
            "logger": _Quiet(),
        }
        if self.options.sasl_mechanism:
            config["sasl.mechanism"] = self.options.sasl_mechanism
            config["sasl.username"] = self.options.sasl_username
            config["sasl.password"] = self.options.sasl_password
        if self.options.ssl_ca_location:
            config["ssl.ca.location"] = self.options.ssl_ca_location
        return config

    def _producer(self, deadline: float) -> confluent_kafka.Producer:
        """The producer, made if need be, its advertised brokers vetted when due (by ``deadline``)."""
        if not self.lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise TimeoutError(f"no producer within {self.timeout:g} s (another attempt is connecting)")
        try:
            if self.producer is None:
                self.producer = confluent_kafka.Producer(self._config())
                self.vetted_at = float("-inf")
                self.stop = threading.Event()
                args = (self.producer, self.stop, self.timeout)
                threading.Thread(target=_serve, args=args, name="kafka-poll", daemon=True).start()
            if time.monotonic() - self.vetted_at >= METADATA_SECONDS:
                wait = max(0.05, deadline - time.monotonic())
                metadata = self.producer.list_topics(self.options.topic, timeout=min(self.timeout, wait))
                refused = brokers_refused(
                    metadata, allow_private=self.destination.allow_private, resolver=self.resolver
                )
                if refused is not None:
                    self._drop()
                    raise Refused("private_address", refused)
                topic = metadata.topics.get(self.options.topic)
                if topic is None or topic.error is not None:
                    raise LookupError(f"topic {self.options.topic!r} does not exist (never created by webhooks)")
                self.vetted_at = time.monotonic()
            return self.producer
        finally:
            self.lock.release()

    def _drop(self) -> None:
        """Forget the producer, dropping what it still holds (a message it sends after its attempt
        failed would be a copy the schedule's retry sends again)."""
        producer, self.producer = self.producer, None
        self.stop.set()
        if producer is not None:
            producer.purge()

    def _renew(self, producer: confluent_kafka.Producer) -> None:
        """After a lost broker, the next attempt makes a new producer (librdkafka's own reconnects and
        its wait for a producer id after a broker restart outlasted every attempt); ``producer`` is
        left to end what it holds, each message's own attempt waiting on it."""
        with self.lock:
            if self.producer is producer:
                self.producer = None
                self.stop.set()

    def publish(self, lease: Lease, headers: Mapping[str, str], started_at: datetime) -> Result:
        fields = {k.lower(): v for k, v in headers.items() if k.lower() not in SKIPPED}
        clock = time.monotonic()
        deadline = clock + 2 * self.timeout  # the metadata and the produce, inside the lease (2 × timeout + margin)

        def failed(error: str) -> Result:
            return Result(lease, started_at, time.monotonic() - clock, None, f"{error}: {self.target}")

        done = threading.Event()
        outcome: list[Any] = []

        def acknowledged(error: confluent_kafka.KafkaError | None, message: confluent_kafka.Message) -> None:
            outcome.append((error, message))
            done.set()

        try:
            producer = self._producer(deadline)
            producer.produce(
                self.options.topic,
                value=lease.body,
                key=message_key(self.options, lease, fields).encode(),
                headers=[(name, value.encode()) for name, value in fields.items()],
                on_delivery=acknowledged,
            )
            done.wait(max(0.0, deadline - time.monotonic()))  # the producer's poller calls ``acknowledged``
        except Refused as exc:
            return failed(f"refused: {exc}")
        except LookupError as exc:
            return failed(f"refused: {exc}")
        except TimeoutError as exc:
            return failed(f"timeout: {exc}")
        except BufferError:
            return failed("timeout: the producer's queue is full")
        except confluent_kafka.KafkaException as exc:  # the metadata read, or produce() itself
            error = exc.args[0] if exc.args else None
            if isinstance(error, confluent_kafka.KafkaError) and error.code() in LOST and self.producer is not None:
                self._renew(self.producer)
            return failed(self._failure(error))
        if not outcome:
            self._renew(producer)
            return failed(f"timeout: no acknowledgement within {2 * self.timeout:g} s")
        error, message = outcome[0]
        if error is not None:
            if not error.fatal() and error.code() in LOST:
                self._renew(producer)
            return failed(self._failure(error))
        seconds = time.monotonic() - clock
        text = f"{message.topic()} {message.partition()} {message.offset()}"
        return Result(lease, started_at, seconds, None, None, None, text, acknowledged=True)

    def _failure(self, error: Any) -> str:
        """An attempt's error from librdkafka's; a fatal one drops the producer (the next attempt makes a new one)."""
        if not isinstance(error, confluent_kafka.KafkaError):
            return f"connect: {error}"
        if error.fatal():
            with self.lock:
                self._drop()
        code = error.code()
        if code in LOST[:2]:
            return f"timeout: no acknowledgement within {self.timeout:g} s"
        if code in LOST[2:]:
            return f"connect: {error.str()}"
        return f"refused: {error.name()} {error.str()}".rstrip()

    def close(self) -> None:
        with self.lock:
            self._drop()


def _serve(producer: confluent_kafka.Producer, stop: threading.Event, timeout: float) -> None:
    """Serve ``producer``'s delivery reports (each wakes its attempt at once) until ``stop``, then
    until what it still holds is reported or its time is over."""
    while not stop.is_set():
        producer.poll(0.05)
    end = time.monotonic() + timeout + 1
    while len(producer) > 0 and time.monotonic() < end:
        producer.poll(0.05)


class _Quiet:
    """librdkafka's log lines, dropped: a broker down is each attempt's error, not a line a second."""

    def log(self, *args: Any, **kwargs: Any) -> None:
        return None
