"""``kind = "rabbitmq"``: each delivery is one ``basic.publish`` to the destination's exchange, confirmed.

The message's body is the event's bytes, unchanged; its AMQP headers are the HTTP forward's headers
named in lower case (``content-type``, ``webhook-id``, ``webhook-timestamp``, ``webhook-signature``,
``webhooks-endpoint``, ``webhooks-event-id``, ``webhooks-event-type``, ``webhooks-object``,
``webhooks-object-version``; not ``idempotency-key``, which equals ``webhook-id``), also set as the
properties ``content_type`` and ``message_id``; persistent (delivery mode 2). The routing key is
the destination's ``routing_key``, else the event's type.

Delivered means the broker confirmed the message (publisher confirms) and did not return it:
published with ``mandatory``, a message no queue is bound to receive is returned, and that is a
failed attempt (``unroutable: …``, the delivery stays ``pending``). The broker down, refusing (no
such exchange, a nack, access refused) or slower than ``timeout_seconds`` is a failed attempt too,
retried on the destination's schedule.

Connections (at most ``max_in_flight``: pika's are not thread-safe, so each publish holds one) are
opened to an address ``guard.vet`` checked, by IP; ``amqps://`` checks the certificate against the
URL's host name.
"""

from __future__ import annotations

import ssl
import threading
import time
import urllib.parse
from collections.abc import Mapping
from datetime import datetime

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel

from webhooks.configuration.buses import RabbitMQ
from webhooks.configuration.destinations import Destination
from webhooks.forward.leases import Lease, Result
from webhooks.guard import Refused, Resolver, resolve_within, vet

SKIPPED = ("idempotency-key",)  # the same value as webhook-id
PERSISTENT = 2


class RabbitMQPublisher:
    """Confirmed publishes to one exchange over a small pool of blocking connections."""

    def __init__(self, destination: Destination, resolver: Resolver) -> None:
        assert isinstance(destination.bus, RabbitMQ)
        self.options = destination.bus
        self.target = destination.target
        self.timeout = destination.timeout_seconds
        self.allow_private = destination.allow_private
        self.resolver = resolve_within(resolver, destination.timeout_seconds)
        parts = urllib.parse.urlsplit(destination.url)
        self.host = parts.hostname or ""
        self.tls = parts.scheme == "amqps"
        self.port = parts.port or (5671 if self.tls else 5672)
        path = parts.path[1:] if parts.path.startswith("/") else parts.path
        self.vhost = urllib.parse.unquote(path) or "/"
        user = urllib.parse.unquote(parts.username or "guest")
        self.credentials = pika.PlainCredentials(user, urllib.parse.unquote(parts.password or "guest"))
        self.idle: list[tuple[pika.BlockingConnection, BlockingChannel | None]] = []
        self.lock = threading.Lock()

    def _connect(self) -> pika.BlockingConnection:
        addresses = vet(self.host, self.port, allow_private=self.allow_private, resolver=self.resolver)
        tls = None
        if self.tls:
            tls = pika.SSLOptions(ssl.create_default_context(), server_hostname=self.host)
        failure: Exception = OSError(f"{self.host} has no address to connect to")
        for address in addresses:
            parameters = pika.ConnectionParameters(
                host=address,
                port=self.port,
                virtual_host=self.vhost,
                credentials=self.credentials,
                ssl_options=tls,
                connection_attempts=1,
                socket_timeout=self.timeout,
                stack_timeout=self.timeout,
                blocked_connection_timeout=self.timeout,
            )
            try:
                return pika.BlockingConnection(parameters)
            except pika.exceptions.AMQPConnectionError as exc:
                failure = exc
        raise failure

    def _take(self) -> tuple[pika.BlockingConnection, BlockingChannel]:
        """An idle connection and its confirming channel, or a new pair."""
        with self.lock:
            while self.idle:
                connection, channel = self.idle.pop()
                if connection.is_open:
                    break
            else:
                connection = None
        if connection is None:
            connection = self._connect()
            channel = None
        if channel is None or not channel.is_open:  # a broker's refusal closes the channel, not the connection
            channel = connection.channel()
            channel.confirm_delivery()
        return connection, channel

    def publish(self, lease: Lease, headers: Mapping[str, str], started_at: datetime) -> Result:
        amqp_headers = {k.lower(): v for k, v in headers.items() if k.lower() not in SKIPPED}
        properties = pika.BasicProperties(
            content_type=amqp_headers.get("content-type"),
            message_id=amqp_headers.get("webhook-id"),
            delivery_mode=PERSISTENT,
            headers=amqp_headers,
        )
        routing_key = self.options.routing_key or amqp_headers.get("webhooks-event-type", "")
        clock = time.monotonic()
        connection: pika.BlockingConnection | None = None
        channel: BlockingChannel | None = None

        def failed(error: str) -> Result:
            return Result(lease, started_at, time.monotonic() - clock, None, f"{error}: {self.target}")

        expired: list[bool] = []
        try:
            connection, channel = self._take()
            timer = _deadline(connection, self.timeout, expired)
            try:
                channel.basic_publish(self.options.exchange, routing_key, lease.body, properties, mandatory=True)
            finally:
                connection._impl._adapter_remove_timeout(timer)
        except Refused as exc:
            return failed(f"refused: {exc}")
        except pika.exceptions.UnroutableError:
            self._give_back(connection, channel)
            return failed(f"unroutable: exchange {self.options.exchange!r} routes {routing_key!r} to no queue")
        except pika.exceptions.NackError:
            self._give_back(connection, channel)
            return failed("refused: the broker did not accept the message (nack)")
        except pika.exceptions.ChannelClosedByBroker as exc:
            self._give_back(connection, channel)
            return failed(f"refused: {exc.reply_code} {exc.reply_text}")
        except (pika.exceptions.AMQPError, OSError) as exc:
            self._discard(connection)
            if expired:
                return failed(f"timeout: no confirm within {self.timeout:g} s")
            return failed(f"connect: {exc.__class__.__name__} {exc}".rstrip())
        self._give_back(connection, channel)
        seconds = time.monotonic() - clock
        return Result(lease, started_at, seconds, None, None, None, "confirmed", acknowledged=True)

    def _give_back(self, connection: pika.BlockingConnection | None, channel: BlockingChannel | None) -> None:
        if connection is not None and channel is not None and connection.is_open:
            with self.lock:
                self.idle.append((connection, channel))

    def _discard(self, connection: pika.BlockingConnection | None) -> None:
        if connection is not None and connection.is_open:
            try:
                connection.close()
            except (pika.exceptions.AMQPError, OSError):
                pass

    def close(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, []
        for connection, _ in idle:
            self._discard(connection)


def _deadline(connection: pika.BlockingConnection, seconds: float, expired: list[bool]) -> object:
    """A timer that cuts ``connection`` after ``seconds`` (and notes it in ``expired``): the wait for a
    confirm then ends with the connection lost. Pika's public timers (``call_later``) fire only inside
    ``process_data_events``, never while ``basic_publish`` waits for its confirm, so this one is set
    on the connection's I/O loop itself (``_impl``: pinned by tests/forward/test_bus_rabbitmq.py's
    ``test_a_broker_that_stops_answering_is_a_timeout_within_the_lease``)."""

    def cut() -> None:
        expired.append(True)
        # As pika's own heartbeat checker ends a silent connection: the reason first, then the stream.
        connection._impl._terminate_stream(pika.exceptions.StreamLostError(f"no confirm within {seconds:g} s"))

    return connection._impl._adapter_call_later(seconds, cut)
