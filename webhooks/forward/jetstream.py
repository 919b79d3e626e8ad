"""``kind = "nats"``: each delivery is one JetStream publish to the destination's subject, its ack awaited.

The message's payload is the event's bytes, unchanged; its NATS headers are the HTTP forward's
headers named in lower case (``content-type``, ``webhook-id``, ``webhook-timestamp``,
``webhook-signature``, ``webhooks-endpoint``, ``webhooks-event-id``, ``webhooks-event-type``,
``webhooks-object``, ``webhooks-object-version``; not ``idempotency-key``), and ``Nats-Msg-Id`` is
the ``webhook-id``: a re-send within the stream's ``duplicate_window`` is dropped by the server
(the ack says ``duplicate``). With ``stream`` set, the publish expects that stream
(``Nats-Expected-Stream``): a subject held by another stream is refused.

Delivered means the stream acknowledged the message (stored, as its ``storage`` and ``replicas``
say). NATS down, no stream for the subject, a refusal or no ack within ``timeout_seconds`` is a
failed attempt: the delivery stays ``pending``, retried on the destination's schedule.

nats-py is asyncio: each publisher runs one private event loop on a daemon thread, and the sending
threads hand it coroutines (``run_coroutine_threadsafe``), each bounded by the destination's
timeout. The connection is opened to an address ``guard.vet`` checked (``tls://``: the certificate
is checked against the URL's host name); the client does not reconnect by itself: the next publish
after a loss vets and connects again.

On its first connection the publisher reads the stream's ``duplicate_window`` and logs a warning
when it is shorter than the delivery lease plus the first retry: a re-send after a lost ack could
then come after the server forgot the id, and JetStream would store the message twice.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import ssl
import threading
import time
import urllib.parse
from collections.abc import Coroutine, Mapping
from datetime import datetime
from typing import Any, TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client

from webhooks.configuration.buses import Nats
from webhooks.configuration.destinations import Destination
from webhooks.forward.deliveries import LEASE_MARGIN
from webhooks.forward.leases import Lease, Result
from webhooks.guard import Refused, Resolver, resolve_within, vet

SKIPPED = ("idempotency-key",)  # the same value as webhook-id
log = logging.getLogger(__name__)
T = TypeVar("T")


class NatsPublisher:
    """JetStream publishes to one subject over one connection, driven by a private event loop."""

    def __init__(self, destination: Destination, resolver: Resolver) -> None:
        assert isinstance(destination.bus, Nats)
        self.options = destination.bus
        self.destination = destination
        self.target = destination.target
        self.timeout = destination.timeout_seconds
        self.resolver = resolve_within(resolver, destination.timeout_seconds)
        parts = urllib.parse.urlsplit(destination.url)
        self.host = parts.hostname or ""
        self.port = parts.port or 4222
        self.tls = parts.scheme == "tls"
        self.user = urllib.parse.unquote(parts.username) if parts.username else None
        self.password = urllib.parse.unquote(parts.password) if parts.password else None
        self.client: Client | None = None
        self.checked = False  # the duplicate window, once
        self.connecting = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=f"nats-{destination.name}", daemon=True)
        self.thread.start()

    def _run(self, coroutine: Coroutine[Any, Any, T], deadline: float | None = None) -> T:
        """``coroutine``'s value, run on the private loop; raises TimeoutError past the timeout, or
        past ``deadline`` (``time.monotonic()``) when that comes first."""
        limit = self.timeout if deadline is None else min(self.timeout, max(0.05, deadline - time.monotonic()))
        future = asyncio.run_coroutine_threadsafe(asyncio.wait_for(coroutine, limit), self.loop)
        try:
            return future.result(limit + 1)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer within {self.timeout:g} s") from None

    def _connected(self, deadline: float) -> Client:
        """The connection, opened if need be, by ``deadline``: an attempt never waits past it for
        another attempt's connect (a broker that accepts and never answers held every attempt
        behind one lock, past its lease)."""
        if not self.connecting.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise TimeoutError(f"no connection within {self.timeout:g} s (another attempt is connecting)")
        try:
            client = self.client
            if client is not None and client.is_connected:
                return client
            self.client = None
            if client is not None:
                self._close(client, deadline)
            addresses = vet(self.host, self.port, allow_private=self.destination.allow_private, resolver=self.resolver)
            context = ssl.create_default_context() if self.tls else None
            failure: Exception = OSError(f"{self.host} has no address to connect to")
            for address in addresses:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"no connection within {self.timeout:g} s")
                try:
                    client = self._run(self._connect(address, context), deadline)
                except (OSError, nats.errors.Error) as exc:
                    failure = exc
                    continue
                self.client = client
                if not self.checked:
                    self.checked = True
                    self._check_window(client, deadline)
                return client
            raise failure
        finally:
            self.connecting.release()

    async def _connect(self, address: str, context: ssl.SSLContext | None) -> Client:
        host = f"[{address}]" if ":" in address else address

        async def quiet(exc: Exception) -> None:  # the attempt's error says it; no log line per loss
            return None

        return await nats.connect(
            servers=[f"nats://{host}:{self.port}"],
            tls=context,
            tls_hostname=self.host if context else None,
            user=self.user if self.password is not None else None,
            password=self.password,
            token=self.user if self.password is None else None,
            connect_timeout=max(1, round(self.timeout)),
            allow_reconnect=False,
            max_reconnect_attempts=0,
            error_cb=quiet,
        )

    def _check_window(self, client: Client, deadline: float) -> None:
        """A warning when the stream forgets a ``webhook-id`` before a re-send could come."""
        first_retry = self.destination.retry_schedule[0] if self.destination.retry_schedule else 0.0
        needed = 2 * self.timeout + LEASE_MARGIN + first_retry  # the lease (deliveries.lease), then the retry

        async def window() -> tuple[str, float]:
            js = client.jetstream(timeout=self.timeout)
            stream = self.options.stream or await js.find_stream_name_by_subject(self.options.subject)
            info = await js.stream_info(stream)
            return stream, float(info.config.duplicate_window or 0)

        try:
            stream, seconds = self._run(window(), deadline)
        except TimeoutError:
            log.warning("forward: %s: no answer reading the stream's duplicate_window", self.destination.name)
            return
        except nats.js.errors.NotFoundError:
            log.warning("forward: %s: no stream holds subject %s", self.destination.name, self.options.subject)
            return
        except (OSError, nats.errors.Error) as exc:
            log.warning("forward: %s: cannot read the stream's duplicate_window (%s)", self.destination.name, exc)
            return
        if seconds < needed:
            log.warning(
                "forward: %s: stream %s keeps message ids %g s (duplicate_window), less than the lease and "
                "first retry (%g s): a re-send after a lost ack may be stored twice",
                self.destination.name,
                stream,
                seconds,
                needed,
            )

    def publish(self, lease: Lease, headers: Mapping[str, str], started_at: datetime) -> Result:
        fields = {k.lower(): v for k, v in headers.items() if k.lower() not in SKIPPED}
        fields["Nats-Msg-Id"] = fields["webhook-id"]
        clock = time.monotonic()
        deadline = clock + 2 * self.timeout  # the connect and the publish, inside the lease (2 × timeout + margin)

        def failed(error: str) -> Result:
            return Result(lease, started_at, time.monotonic() - clock, None, f"{error}: {self.target}")

        try:
            client = self._connected(deadline)
            js = client.jetstream(timeout=self.timeout)
            body, stream = lease.body, self.options.stream
            ack = self._run(js.publish(self.options.subject, body, stream=stream, headers=fields), deadline)
        except Refused as exc:
            return failed(f"refused: {exc}")
        except (nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError):
            return failed(f"refused: no stream holds subject {self.options.subject!r}")
        except nats.js.errors.APIError as exc:
            return failed(f"refused: {exc.description or exc}")
        except (TimeoutError, nats.errors.TimeoutError):
            return failed(f"timeout: no ack within {self.timeout:g} s")
        except (OSError, nats.errors.Error) as exc:
            return failed(f"connect: {exc.__class__.__name__} {exc}".rstrip())
        seconds = time.monotonic() - clock
        text = f"{ack.stream} {ack.seq}" + (" duplicate" if ack.duplicate else "")
        return Result(lease, started_at, seconds, None, None, None, text, acknowledged=True)

    def _close(self, client: Client, deadline: float | None = None) -> None:
        try:
            self._run(client.close(), deadline)
        except (OSError, nats.errors.Error):
            pass

    def close(self) -> None:
        with self.connecting:
            if self.client is not None:
                self._close(self.client)
                self.client = None
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(self.timeout)
        if not self.thread.is_alive():
            self.loop.close()
