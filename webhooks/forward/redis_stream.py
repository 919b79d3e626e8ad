"""``kind = "redis-stream"``: each delivery is one ``XADD`` to the destination's stream.

The entry has the field ``body`` (the event's bytes, unchanged) and one field per header of the
HTTP forward, named in lower case (``webhook-id``, ``webhook-timestamp``, ``webhook-signature``,
``content-type``, ``webhooks-endpoint``, ``webhooks-event-id``, ``webhooks-event-type``,
``webhooks-object``, ``webhooks-object-version``; not ``idempotency-key``, which equals
``webhook-id``). Delivered means ``XADD`` returned the entry's id (kept as the attempt's answer);
how durable the entry is then is the Redis server's persistence settings (``appendonly``,
``appendfsync``). Redis down, refusing or too slow is a failed attempt: the delivery stays
``pending`` and is retried on the destination's schedule.

Every new connection resolves the host through ``guard.vet`` and connects to a vetted address
(TLS, ``rediss://``, checks the certificate against the URL's host name). No client-side retry:
a command retried after its reply was lost would add the entry twice; the schedule retries, with
the same ``webhook-id``.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.connection import Connection, SSLConnection, parse_url
from redis.retry import Retry
from redis.typing import EncodableT, FieldT

from webhooks.configuration.buses import RedisStream
from webhooks.configuration.destinations import Destination
from webhooks.forward.leases import Lease, Result
from webhooks.guard import Refused, Resolver, resolve_within, vet

SKIPPED = ("idempotency-key",)  # the same value as webhook-id


def _vetted_socket(connection: Any, allow_private: bool, resolver: Resolver) -> socket.socket:
    """A TCP socket to a vetted address of ``connection``'s host (raises Refused or OSError)."""
    timeout = connection.socket_connect_timeout
    bounded = resolve_within(resolver, timeout)
    addresses = vet(connection.host, connection.port, allow_private=allow_private, resolver=bounded)
    failure: OSError = OSError(f"{connection.host} has no address to connect to")
    for address in addresses:
        try:
            line = socket.create_connection((address, connection.port), timeout=timeout)
        except OSError as exc:
            failure = exc
            continue
        line.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        line.settimeout(connection.socket_timeout)
        return line
    raise failure


class _Vetted(Connection):
    def __init__(self, *, allow_private: bool, resolver: Resolver, **kwargs: Any) -> None:
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
        self._allow_private, self._resolver = allow_private, resolver

    def _connect(self) -> socket.socket:
        return _vetted_socket(self, self._allow_private, self._resolver)


class _VettedTLS(SSLConnection):
    def __init__(self, *, allow_private: bool, resolver: Resolver, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._allow_private, self._resolver = allow_private, resolver

    def _connect(self) -> socket.socket | ssl.SSLSocket:
        line = _vetted_socket(self, self._allow_private, self._resolver)
        try:
            secure: ssl.SSLSocket = self._wrap_socket_with_ssl(line)  # type: ignore[no-untyped-call]  # server_hostname: the URL's host
        except (OSError, redis.RedisError):
            line.close()
            raise
        return secure


class RedisStreamPublisher:
    """``XADD`` to one stream over a pool of at most ``max_in_flight`` connections."""

    def __init__(self, destination: Destination, resolver: Resolver) -> None:
        assert isinstance(destination.bus, RedisStream)
        self.options = destination.bus
        self.target = destination.target
        params: dict[str, Any] = parse_url(destination.url)  # type: ignore[no-untyped-call]  # untyped upstream
        tls = params.pop("connection_class", None) is SSLConnection
        self.pool = redis.ConnectionPool(
            connection_class=_VettedTLS if tls else _Vetted,
            max_connections=destination.max_in_flight,
            socket_timeout=destination.timeout_seconds,
            socket_connect_timeout=destination.timeout_seconds,
            retry=Retry(NoBackoff(), 0),
            allow_private=destination.allow_private,
            resolver=resolver,
            **params,
        )
        self.client = redis.Redis(connection_pool=self.pool)

    def publish(self, lease: Lease, headers: Mapping[str, str], started_at: datetime) -> Result:
        fields: dict[FieldT, EncodableT] = {"body": lease.body}
        fields.update({k.lower(): v for k, v in headers.items() if k.lower() not in SKIPPED})
        clock = time.monotonic()
        try:
            entry = self.client.xadd(
                self.options.stream, fields, maxlen=self.options.maxlen, approximate=self.options.maxlen is not None
            )
        except Refused as exc:
            return Result(lease, started_at, time.monotonic() - clock, None, f"refused: {self.target}: {exc}")
        except redis.TimeoutError as exc:
            return Result(lease, started_at, time.monotonic() - clock, None, f"timeout: {self.target}: {exc}")
        except redis.ConnectionError as exc:
            return Result(lease, started_at, time.monotonic() - clock, None, f"connect: {self.target}: {exc}")
        except redis.RedisError as exc:  # the server refused the command (an error reply: OOM, READONLY, WRONGTYPE…)
            return Result(lease, started_at, time.monotonic() - clock, None, f"refused: {self.target}: {exc}")
        seconds = time.monotonic() - clock
        text = entry.decode() if isinstance(entry, bytes) else str(entry)
        return Result(lease, started_at, seconds, None, None, None, text, acknowledged=True)

    def close(self) -> None:
        self.pool.disconnect()
