"""Each bus destination kind's own options (``redis-stream``, ``rabbitmq``, ``nats``, ``sqs``,
``kafka``), checked at start-up beside the common ones (``webhooks.configuration.destinations``):
one dataclass per kind, held as ``Destination.bus``, and its builder in ``BUSES``. A mistake stops
start-up with one line naming the destination and the option.

``kafka`` names its brokers ``bootstrap_servers`` (``host:port`` entries, a list or one
comma-separated string; port 9092 by default), held as the destination's URL
``kafka://host:port,host:port`` so that every destination has one place to show and vet; each entry
is vetted like a URL (``bootstrap_urls``). Its ``sasl_password`` is a credential: never in a repr,
sealed in the database like every secret (``configuration.live.CREDENTIALS``).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhooks.configuration import options
from webhooks.errors import ConfigError

SQS_OPTIONS = ("queue_url", "region", "endpoint_url", "access_key_id", "secret_access_key")
KAFKA_OPTIONS = (
    "bootstrap_servers",
    "topic",
    "key",
    "security_protocol",
    "sasl_mechanism",
    "sasl_username",
    "sasl_password",
    "ssl_ca_location",
)
KAFKA_PORT = 9092
KAFKA_KEYS = ("object", "event_id", "endpoint", "type")  # what a message's key is: ``Kafka.key``
KAFKA_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
KAFKA_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")  # Kafka's own rule for a topic's name


@dataclass(frozen=True)
class RedisStream:
    """A ``redis-stream`` destination's own options: the stream each message is added to (``XADD``)
    and, if set, its approximate length (``MAXLEN ~``)."""

    stream: str
    maxlen: int | None = None

    @property
    def place(self) -> str:
        return self.stream


@dataclass(frozen=True)
class RabbitMQ:
    """A ``rabbitmq`` destination's own options: the exchange each message is published to and its
    routing key (None: the event's type)."""

    exchange: str
    routing_key: str | None = None

    @property
    def place(self) -> str:
        return self.exchange


@dataclass(frozen=True)
class Nats:
    """A ``nats`` destination's own options: the subject each message is published to and the
    JetStream stream that must hold it (None: whichever stream holds the subject)."""

    subject: str
    stream: str | None = None

    @property
    def place(self) -> str:
        return self.subject


@dataclass(frozen=True)
class Sqs:
    """An ``sqs`` destination's own options: its queue, region, the endpoint to call (None: AWS's for
    the region) and the credentials (None: boto3's default chain), never in a repr."""

    queue_url: str
    region: str
    endpoint_url: str | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)

    @property
    def place(self) -> str:
        return self.queue_url

    @property
    def fifo(self) -> bool:
        return self.queue_url.endswith(".fifo")


@dataclass(frozen=True)
class Kafka:
    """A ``kafka`` destination's own options: the brokers to bootstrap from, the topic, what each
    message's key is (``object``: the event's object, ``type/id``, so that one object's versions land
    on one partition in order; the event id where there is none), TLS and SASL. The password is never
    in a repr."""

    servers: tuple[tuple[str, int], ...]
    topic: str
    key: str = "object"
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_ca_location: str | None = None

    @property
    def place(self) -> str:
        return self.topic

    @property
    def tls(self) -> bool:
        return self.security_protocol.endswith("SSL")


BusOptions = RedisStream | RabbitMQ | Nats | Sqs | Kafka


def bootstrap_url(where: str, value: Any) -> str:
    """``bootstrap_servers`` (a list of ``host[:port]``, or one comma-separated string) as the
    destination's URL, ``kafka://host:port,…`` (each port said)."""
    entries = value.split(",") if isinstance(value, str) else value
    if not isinstance(entries, list) or not entries or not all(isinstance(e, str) and e.strip() for e in entries):
        raise ConfigError(
            f'{where}: bootstrap_servers is required for destination kind kafka (bootstrap_servers = "host:9092")'
        )
    if len(entries) > 16:
        raise ConfigError(f"{where}: bootstrap_servers: at most 16 brokers to bootstrap from, not {len(entries)}")
    servers = []
    for entry in (e.strip() for e in entries):
        try:
            parts = urllib.parse.urlsplit(f"kafka://{entry}")
            port = parts.port or KAFKA_PORT
        except ValueError:
            raise ConfigError(f"{where}: bootstrap_servers: {entry!r} is not host:port") from None
        if not parts.hostname or parts.path or parts.query or "@" in entry or "#" in entry or port == 0:
            raise ConfigError(f"{where}: bootstrap_servers: {entry!r} is not host:port (credentials: sasl_*)")
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        servers.append(f"{host}:{port}")
    return "kafka://" + ",".join(servers)


def bootstrap_urls(url: str) -> list[str]:
    """Each broker of a ``kafka://a:9092,b:9092`` URL as a URL of its own, for the guard."""
    return [f"kafka://{entry}" for entry in url.removeprefix("kafka://").split(",")]


def servers_of(url: str) -> tuple[tuple[str, int], ...]:
    found = []
    for one in bootstrap_urls(url):
        parts = urllib.parse.urlsplit(one)
        found.append((parts.hostname or "", parts.port or KAFKA_PORT))
    return tuple(found)


def _redis_stream(where: str, raw: Mapping[str, Any], url: str) -> RedisStream:
    if urllib.parse.urlsplit(url).query:
        raise ConfigError(f"{where}: url: no ?query in a redis-stream URL (its options are the destination's keys)")
    path = urllib.parse.urlsplit(url).path.strip("/")
    if path and not path.isdigit():
        raise ConfigError(f"{where}: url: the path of a redis-stream URL is a database number, not {path!r}")
    stream = raw.get("stream")
    if not isinstance(stream, str) or not stream.strip():
        raise ConfigError(f'{where}: stream is required for destination kind redis-stream (stream = "webhooks")')
    return RedisStream(stream.strip(), options.number(where, raw, "maxlen", None, whole=True))


def _rabbitmq(where: str, raw: Mapping[str, Any], url: str) -> RabbitMQ:
    if urllib.parse.urlsplit(url).query:
        raise ConfigError(f"{where}: url: no ?query in a rabbitmq URL (its options are the destination's keys)")
    exchange = options.required(where, raw, "exchange", "rabbitmq", "webhooks")
    return RabbitMQ(exchange, options.optional(where, raw, "routing_key"))


def _nats(where: str, raw: Mapping[str, Any], url: str) -> Nats:
    parts = urllib.parse.urlsplit(url)
    if parts.query or parts.path.strip("/"):
        raise ConfigError(
            f"{where}: url: a nats URL is scheme, host and port only (its options are the destination's keys)"
        )
    subject = options.required(where, raw, "subject", "nats", "webhooks.stripe")
    if any(c in subject for c in " *>") or ".." in subject:
        raise ConfigError(f"{where}: subject {subject!r} is not a subject to publish to (no spaces, * or >)")
    return Nats(subject, options.optional(where, raw, "stream"))


def _sqs(where: str, raw: Mapping[str, Any], url: str) -> Sqs:
    parts = urllib.parse.urlsplit(url)
    if parts.query or len(parts.path.strip("/").split("/")) != 2:
        raise ConfigError(f"{where}: queue_url: an SQS queue URL is https://<endpoint>/<account>/<queue>, no ?query")
    if options.flag(where, raw, "ordered") and not url.endswith(".fifo"):
        raise ConfigError(f"{where}: ordered = true needs a FIFO queue, whose queue_url ends in .fifo")
    key_id, secret = (options.optional(where, raw, option) for option in ("access_key_id", "secret_access_key"))
    if (key_id is None) != (secret is None):
        raise ConfigError(f"{where}: access_key_id and secret_access_key go together (neither: boto3's own chain)")
    region = options.required(where, raw, "region", "sqs", "eu-west-1")
    return Sqs(url, region, options.optional(where, raw, "endpoint_url"), key_id, secret)


def _kafka(where: str, raw: Mapping[str, Any], url: str) -> Kafka:
    topic = options.required(where, raw, "topic", "kafka", "webhooks")
    if not TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise ConfigError(f"{where}: topic {topic!r} is not a Kafka topic name (letters, digits, . _ -)")
    protocol = options.one_of(where, raw, "security_protocol", KAFKA_PROTOCOLS)
    sasl = protocol.startswith("SASL")
    mechanism = options.optional(where, raw, "sasl_mechanism")
    username, password = options.optional(where, raw, "sasl_username"), options.optional(where, raw, "sasl_password")
    if not sasl and (mechanism or username or password):
        raise ConfigError(f"{where}: sasl_* options need security_protocol = SASL_SSL (or SASL_PLAINTEXT)")
    if sasl:
        mechanism = options.one_of(where, raw, "sasl_mechanism", KAFKA_MECHANISMS)
        if username is None or password is None:
            raise ConfigError(f"{where}: security_protocol {protocol} needs sasl_username and sasl_password")
    ca = options.optional(where, raw, "ssl_ca_location")
    if ca is not None and not protocol.endswith("SSL"):
        raise ConfigError(f"{where}: ssl_ca_location needs security_protocol = SSL (or SASL_SSL)")
    key = options.one_of(where, raw, "key", KAFKA_KEYS)
    return Kafka(servers_of(url), topic, key, protocol, mechanism, username, password, ca)


BUSES: dict[str, Callable[[str, Mapping[str, Any], str], BusOptions]] = {
    "redis-stream": _redis_stream,
    "rabbitmq": _rabbitmq,
    "nats": _nats,
    "sqs": _sqs,
    "kafka": _kafka,
}
