"""``[destinations.<name>]``: where events are forwarded to, validated at start-up.

A destination has a ``kind``: ``http`` (the default: a service of the team's own) or a bus
(``redis-stream``, ``rabbitmq``, ``nats``, ``sqs``, ``kafka``; each kind lists its options in ``KINDS``,
and ``webhooks.configuration.buses`` checks them). It fails
closed like an endpoint: an unknown kind, a missing or malformed secret, a URL not of its kind's
schemes, a host on a loopback, private or link-local address without ``allow_private = true`` (the
cloud metadata address always), an unknown key or one of another kind, or an endpoint whose
``forward`` names no such destination stops start-up with one line naming the destination and the
option.

Only a bus kind takes credentials, as the URL's ``user:password@``; an HTTP URL's query string
often holds a token. Neither is ever shown: ``Destination.target`` is the URL with both replaced
by ``***`` (``redacted``), for the API, the console, the banner and logs. ``sqs`` names its URL
``queue_url`` (the target) and takes ``access_key_id`` / ``secret_access_key`` (``env:`` values;
neither: boto3's default chain), kept out of every repr; its ``endpoint_url`` is vetted like a
URL, and ``ordered = true`` needs a FIFO queue (``.fifo``).
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import functools
import hashlib
import importlib.util
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhooks import guard
from webhooks.configuration import filters, options
from webhooks.configuration.buses import (
    BUSES,
    KAFKA_OPTIONS,
    KAFKA_PORT,
    SQS_OPTIONS,
    BusOptions,
    bootstrap_url,
    bootstrap_urls,
)
from webhooks.errors import ConfigError
from webhooks.urls import redacted as redacted  # (there: every URL shown)
from webhooks.urls import without_credentials as without_credentials

# Seconds after each failed attempt before the next: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h
# (eight attempts over about 27.6 hours), then ``failed``.
DEFAULT_SCHEDULE = (5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0)
SECRET_PREFIX = "whsec_"
MIN_KEY_BYTES = 24  # the Standard Webhooks specification: 24 to 64 bytes of key
COMMON = (
    "kind",
    "secrets",
    "events",
    "filter",
    "ordered",
    "timeout_seconds",
    "rate_limit",
    "max_in_flight",
    "allow_private",
    "retry_schedule",
    "circuit_failures",
    "probe_seconds",
)


@dataclass(frozen=True)
class Kind:
    """What a destination kind takes: its options beside ``COMMON``, its URL schemes and default port,
    and whether its URL may carry ``user:password@`` (a bus's credentials; never an HTTP URL's)."""

    options: tuple[str, ...]
    schemes: tuple[str, ...]
    port: dict[str, int]
    credentials: bool = False
    client: str = ""  # its client library's top module, from the extra named as the kind ('': always installed)
    url: str = "url"  # the option holding the destination's URL


KINDS: dict[str, Kind] = {
    "http": Kind(("url",), ("http", "https"), {"http": 80, "https": 443}),
    "redis-stream": Kind(("url", "stream", "maxlen"), ("redis", "rediss"), {"redis": 6379, "rediss": 6379}, True),
    "rabbitmq": Kind(
        ("url", "exchange", "routing_key"), ("amqp", "amqps"), {"amqp": 5672, "amqps": 5671}, True, "pika"
    ),
    "nats": Kind(("url", "subject", "stream"), ("nats", "tls"), {"nats": 4222, "tls": 4222}, True, "nats"),
    "sqs": Kind((*SQS_OPTIONS,), ("https", "http"), {"https": 443, "http": 80}, client="boto3", url="queue_url"),
    "kafka": Kind(KAFKA_OPTIONS, ("kafka",), {"kafka": KAFKA_PORT}, client="confluent_kafka", url="bootstrap_servers"),
}
FIELDS = tuple(dict.fromkeys([*COMMON, *(o for kind in KINDS.values() for o in kind.options)]))


@dataclass(frozen=True)
class Destination:
    """One configured destination. ``secrets`` never appear in a repr (logs, tracebacks)."""

    name: str
    url: str = field(repr=False)  # a bus's may carry credentials: ``target`` is what is shown
    secrets: tuple[str, ...] = field(repr=False)
    events: tuple[str, ...] = ()  # globs of event types; empty: every type
    filter: filters.Filter | None = None  # over the verified event, with ``events`` by AND (#42)
    ordered: bool = False
    timeout_seconds: float = 15.0
    rate_limit: float | None = None  # requests a second, service-wide; None: unlimited
    max_in_flight: int = 8
    allow_private: bool = False
    retry_schedule: tuple[float, ...] = DEFAULT_SCHEDULE
    circuit_failures: int = 20  # consecutive failures that open the circuit
    probe_seconds: float = 5.0  # the first probe's wait once open; doubles up to ``MAX_PROBE_SECONDS``
    kind: str = "http"
    bus: BusOptions | None = None  # a bus kind's own options
    target: str = ""  # the URL as shown: ``redacted(url)`` (set from ``url``)

    def __post_init__(self) -> None:
        object.__setattr__(self, "target", redacted(self.url))

    def wants(self, event_type: str) -> bool:
        return not self.events or any(fnmatch.fnmatchcase(event_type, glob) for glob in self.events)

    @property
    def keys(self) -> tuple[bytes, ...]:
        """The HMAC keys, the first signs; all sign during a rotation."""
        return tuple(key(s) for s in self.secrets)

    @functools.cached_property
    def identity(self) -> str:
        """Which service this is, beyond its name: a hash of its URL (a URL may carry a token in its
        query: never stored). A delivery is sent only to the destination it was created for
        (``deliveries.target``); one configured later under the same name at another URL is another.
        A bus is its kind, its URL without credentials (new credentials: the same bus) and its place
        (the stream)."""
        if self.bus is None:
            return hashlib.sha256(self.url.encode()).hexdigest()
        return hashlib.sha256(f"{self.kind}\0{without_credentials(self.url)}\0{self.bus.place}".encode()).hexdigest()

    @property
    def max_attempts(self) -> int:
        return len(self.retry_schedule) + 1


MAX_PROBE_SECONDS = 600.0


def new_secret() -> str:
    """A fresh destination secret, as Svix makes them: ``whsec_`` + base64 of ``MIN_KEY_BYTES``
    random bytes (the admin API's rotation and a new secret without a value)."""
    import secrets

    return "whsec_" + base64.b64encode(secrets.token_bytes(MIN_KEY_BYTES)).decode("ascii")


def key(secret: str) -> bytes:
    value = secret.removeprefix(SECRET_PREFIX)
    return base64.b64decode(value + "=" * (-len(value) % 4), validate=True)


def _secrets(where: str, values: list[str]) -> tuple[str, ...]:
    if not values:
        raise ConfigError(f'{where}: no secrets configured (fail closed): add secrets = ["whsec_…"]')
    for position, secret in enumerate(values, 1):
        try:
            length = len(key(secret))
        except (binascii.Error, ValueError):
            raise ConfigError(f"{where}: secret {position} is not whsec_ followed by base64") from None
        if length < MIN_KEY_BYTES:
            raise ConfigError(f"{where}: secret {position} decodes to {length} bytes; use at least {MIN_KEY_BYTES}")
    return tuple(values)


def kind_of(name: str, raw: Mapping[str, Any]) -> Kind:
    """The table's ``kind`` (``http`` when absent); refuses an unknown kind and an option of another kind."""
    where = f"destination {name!r}"
    value = raw.get("kind", "http")
    if value not in KINDS:
        raise ConfigError(f"{where}: kind {value!r} is not a destination kind (known: {', '.join(KINDS)})")
    kind = KINDS[value]
    for option in sorted(set(raw) - {*COMMON, *kind.options}):
        others = [k for k, other in KINDS.items() if option in other.options]
        if others:
            raise ConfigError(f"{where}: {option} is an option of destination kind {others[0]}, not {value}")
    if kind.client and importlib.util.find_spec(kind.client) is None:  # found, never imported here
        raise ConfigError(f"{where}: kind {value} needs {kind.client}: pip install 'webhooks[{value}]'")
    return kind


def known_keys(name: str, raw: Mapping[str, Any]) -> set[str]:
    """The keys a ``[destinations.<name>]`` table of its kind may have (``configuration.settings`` refuses the rest)."""
    return {*COMMON, *kind_of(name, raw).options}


def destination(name: str, raw: Mapping[str, Any], resolve: Any, resolver: guard.Resolver | None = None) -> Destination:
    """Validate one ``[destinations.<name>]`` table (its keys checked by ``webhooks.configuration.settings`` against
    ``known_keys``: one wording for a typo); ``resolve(value, where)`` turns ``env:NAME`` values into theirs."""
    where = f"destination {name!r}"
    kind = kind_of(name, raw)
    kind_name = str(raw.get("kind", "http"))
    url = resolve(raw.get(kind.url), where)
    if kind_name == "kafka":  # a list of host:port, held as kafka://host:port,…
        url = bootstrap_url(where, url)
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(f"{where}: {kind.url} is required")
    url = url.strip()
    allow_private = options.flag(where, raw, "allow_private")
    vetted = [(kind.url, one) for one in (bootstrap_urls(url) if kind_name == "kafka" else [url])]
    credentials = [k for k in ("access_key_id", "secret_access_key", "sasl_password") if k in raw]
    raw = {**raw, **{k: resolve(raw[k], where) for k in credentials}}  # env: values
    if kind_name == "sqs" and isinstance(raw.get("endpoint_url"), str):  # the endpoint boto3 calls is vetted too
        vetted.append(("endpoint_url", raw["endpoint_url"].strip()))
    for option, value in vetted:
        try:
            guard.check_url(
                value,
                allow_private=allow_private,
                resolver=resolver or guard.system_resolver,
                schemes=kind.port,
                credentials=kind.credentials,
            )
        except guard.Refused as exc:
            raise ConfigError(f"{where}: {option}: {exc}") from None
    bus = BUSES[kind_name](where, raw, url) if kind_name in BUSES else None
    schedule = raw.get("retry_schedule", list(DEFAULT_SCHEDULE))
    if (
        not isinstance(schedule, list)
        or not all(isinstance(s, int | float) and not isinstance(s, bool) and s >= 0 for s in schedule)
        or len(schedule) > 50
    ):
        raise ConfigError(f"{where}: retry_schedule must be a list of at most 50 seconds (each ≥ 0)")
    return Destination(
        name=name,
        url=url,
        secrets=_secrets(where, [str(resolve(s, where)).strip() for s in options.strings(where, raw, "secrets")]),
        events=tuple(options.strings(where, raw, "events")),
        filter=filters.parse(where, raw.get("filter")),
        ordered=options.flag(where, raw, "ordered"),
        timeout_seconds=float(options.number(where, raw, "timeout_seconds", 15)),
        rate_limit=options.number(where, raw, "rate_limit", None),
        max_in_flight=options.number(where, raw, "max_in_flight", 8, whole=True),
        allow_private=allow_private,
        retry_schedule=tuple(float(s) for s in schedule),
        circuit_failures=options.number(where, raw, "circuit_failures", 20, whole=True),
        probe_seconds=float(options.number(where, raw, "probe_seconds", 5)),
        kind=kind_name,
        bus=bus,
    )


def forwards(endpoint: str, raw: Any, destinations: Collection[str]) -> tuple[str, ...]:
    """An endpoint's ``forward = [...]``: names of configured destinations."""
    where = f"endpoint {endpoint!r}"
    names = options.strings(where, {"forward": raw}, "forward")
    for name in names:
        if name not in destinations:
            known = ", ".join(sorted(destinations)) or "none configured"
            raise ConfigError(f"{where}: forward names destination {name!r}, which is not configured ({known})")
    return tuple(dict.fromkeys(names))
