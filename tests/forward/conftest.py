"""Helpers of the forwarding acceptance tests: an app forwarding to local destinations on either
database, signed Stripe events posted (concurrently, too), the forwarder run on a thread, and a
destination that records what it answered and how many requests overlapped."""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any

import pytest
from flask import Flask

from tests.conftest import (
    at_once,
    base_config,
    make_app,
    rows,
    runtime,
    stripe_event,
    stripe_headers,
    unavailable,
    wait_until,
)
from tests.support import brokers, destination, servers
from tests.support.servers import serve_in_thread
from webhooks.configuration import settings as config
from webhooks.errors import ConfigError
from webhooks.forward.dispatcher import Forwarder
from webhooks.forward.dispatcher import drain as drain_forwarder
from webhooks.guard import Resolver, system_resolver

EVENTS, COPIES = 20, 3  # the bus tests' arrive-once load: every event delivered three times by its provider
# The metadata every bus message carries (AMQP and NATS headers, a stream entry's fields, SQS
# attributes), named as the HTTP forward's headers in lower case: issue 33's list.
HEADERS = frozenset(
    {
        "content-type",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "webhooks-endpoint",
        "webhooks-event-id",
        "webhooks-event-type",
        "webhooks-object",
        "webhooks-object-version",
    }
)


def forwarding_app(request: pytest.FixtureRequest, db: str, dests: dict[str, Any], forward: list[str]) -> Flask:
    """An app on ``db`` ("sqlite", or "postgres" with Redis) whose stripe endpoint forwards to ``forward``."""
    url = request.getfixturevalue("sqlite_url" if db == "sqlite" else "pg_url")
    extra: dict[str, Any] = {} if db == "sqlite" else {"REDIS_URL": request.getfixturevalue("redis_url")}
    config = base_config(url, DESTINATIONS=dests, **extra)
    config["ENDPOINTS"]["stripe"]["forward"] = forward
    return make_app(config)


def post(app: Flask, body: bytes) -> int:
    return app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code


def post_concurrently(app: Flask, bodies: list[bytes]) -> list[int]:
    """Every body posted at once, one thread each (the receiver's concurrent duplicates)."""
    return at_once(*(functools.partial(post, app, body) for body in bodies))


def versioned(event_id: str, object_id: str, created: int) -> bytes:
    """A ``payment_intent.updated`` event of ``object_id``: its version grows with ``created``."""
    obj = {"id": object_id, "object": "payment_intent", "status": "processing"}
    return stripe_event(event_id, "payment_intent.updated", created=created, obj=obj)


@contextlib.contextmanager
def forwarding(app: Flask, resolver: Resolver = system_resolver) -> Iterator[Forwarder]:
    """The app's forwarder running on its own thread (as in a worker), stopped at the end."""
    rt = runtime(app)
    forwarder = Forwarder(rt.sessions, rt.settings.destinations, resolver=resolver).start()
    try:
        yield forwarder
    finally:
        forwarder.stop()


def settle_all(app: Flask, resolver: Resolver = system_resolver) -> None:
    """Send, in this thread, whatever is still due (nothing left in flight afterwards)."""
    rt = runtime(app)
    forwarder = Forwarder(rt.sessions, rt.settings.destinations, resolver=resolver)
    try:
        drain_forwarder(forwarder)
    finally:
        forwarder.stop()


def statuses(app: Flask, dest: str | None = None) -> dict[str, str]:
    where = "" if dest is None else " WHERE destination = :d"
    return {
        f"{r[0]}/{r[1]}": r[2]
        for r in rows(app, f"SELECT event_id, destination, status FROM deliveries{where}", d=dest)
    }


def retried_while_down(app: Flask, probes: int = 2) -> None:
    """Until a destination that is down has been tried on its schedule, opened its circuit, and
    failed ``probes`` of the circuit's probes: the outage tests' "down for a while", as an event."""
    failed = "SELECT count(*) FROM delivery_attempts WHERE outcome = 'probe_failed'"
    wait_until(lambda: rows(app, failed)[0][0] >= probes, timeout=120, interval=0.1)


def wait_settled(app: Flask, count: int, timeout: float = 60) -> None:
    """Until ``count`` deliveries exist and none is pending."""
    wait_until(lambda: len(s := statuses(app)) == count and "pending" not in s.values(), timeout=timeout, interval=0.1)


@dataclass
class Answered:
    """One request a ``Script`` answered."""

    id: str
    object: str | None
    version: int | None
    status: int
    at: float


@dataclass
class Script:
    """A destination's ``answer``: ``plan(n)`` gives the n-th request's answer (default 200); it
    records each answer and, with ``delay``, the most requests of one object in flight at once."""

    plan: Callable[[int], destination.Answer] = lambda n: (200, {}, b"ok")
    delay: float = 0.0
    answered: list[Answered] = field(default_factory=list)
    in_flight: dict[str, int] = field(default_factory=dict)
    most_per_object: int = 0
    most_at_once: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, n: int, seen: destination.Seen) -> destination.Answer:
        key = seen.headers.get("webhooks-object", "")
        with self.lock:
            self.in_flight[key] = self.in_flight.get(key, 0) + 1
            self.most_per_object = max(self.most_per_object, self.in_flight[key])
            self.most_at_once = max(self.most_at_once, sum(self.in_flight.values()))
        if self.delay:
            time.sleep(self.delay)  # the destination's own slowness, so that requests overlap
        answer = self.plan(n)
        with self.lock:
            self.in_flight[key] -= 1
            if seen.verified:
                self.answered.append(Answered(seen.id, key or None, seen.version, answer[0], time.monotonic()))
        return answer

    def ok(self) -> list[Answered]:
        with self.lock:
            return [a for a in self.answered if 200 <= a.status < 300]


@contextlib.contextmanager
def serving(script: Script, port: int = 0) -> Iterator[destination.Destination]:
    """A ``tests.support.destination`` service answering by ``script``, on ``port`` if given
    (so that a test can start it where nothing listened before)."""
    server = ThreadingHTTPServer(("127.0.0.1", port), destination.BaseHTTPRequestHandler)
    dest = destination.Destination(f"http://127.0.0.1:{server.server_address[1]}/hooks", answer=script)
    server.RequestHandlerClass = destination._handler(dest)
    server.daemon_threads = True
    serve_in_thread(server)
    try:
        yield dest
    finally:
        dest.released.set()
        server.shutdown()
        server.server_close()


def _broker(make: Callable[[], brokers.Broker], what: str) -> Iterator[brokers.Broker]:
    try:
        server = make()
        server.start()
    except servers.Unavailable as exc:
        unavailable(what, exc)
    yield server
    server.remove()


@pytest.fixture(scope="session")
def rabbitmq() -> Iterator[brokers.Broker]:
    """This session's RabbitMQ node (tests/support/brokers.py), started by the first test that needs it."""
    yield from _broker(brokers.RabbitMQ, "RabbitMQ")


@pytest.fixture(scope="session")
def nats_server() -> Iterator[brokers.Broker]:
    """This session's nats-server with JetStream, started by the first test that needs it."""
    yield from _broker(brokers.NatsServer, "NATS")


@pytest.fixture(scope="session")
def moto_server() -> Iterator[brokers.Broker]:
    """This session's moto server (SQS), started by the first test that needs it."""
    yield from _broker(brokers.MotoServer, "moto (SQS)")


def bus_event(n: int) -> bytes:
    """The bus tests' event ``evt_<n>`` (its object ``pi_<n>``)."""
    return stripe_event(f"evt_{n}", obj={"id": f"pi_{n}", "object": "payment_intent", "status": "succeeded"})


def load_bus(table: dict[str, Any]) -> config.Settings:
    """The configuration of a Stripe endpoint forwarding to destination ``bus`` = ``table``."""
    endpoint = {"provider": "stripe", "secrets": ["whsec_test"], "forward": ["bus"]}
    return config.load({"DATABASE_URL": "sqlite://", "ENDPOINTS": {"stripe": endpoint}, "DESTINATIONS": {"bus": table}})


def refused(table: dict[str, Any]) -> str:
    """The one line start-up refuses destination ``bus`` = ``table`` with."""
    with pytest.raises(ConfigError) as caught:
        load_bus(table)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("destination 'bus': ")
    return message


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[brokers.Broker]:
    """This session's Tansu broker (Kafka's protocol), started by the first test that needs it."""
    yield from _broker(brokers.Tansu, "Tansu (Kafka)")


def silent_attempts(publisher: Callable[[int], Any]) -> None:
    """Eight attempts at once through ``publisher(port)``'s sender to a port that accepts and never
    answers (timeout 1 s): each a timeout or connect failure ending inside its own lease (2 x timeout
    + margin), none waiting on another's connect past its deadline."""
    import socket
    from datetime import UTC, datetime

    from webhooks.forward.deliveries import LEASE_MARGIN
    from webhooks.forward.leases import Lease

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)  # the kernel accepts; nothing ever answers
    sender = publisher(silent.getsockname()[1])
    took: list[float] = []
    results: list[Any] = []

    def attempt(n: int) -> None:
        lease = Lease("stripe", f"evt_{n}", "bus", 1, 0, False, None, b"{}")  # type: ignore[arg-type]
        started = time.monotonic()
        results.append(sender.publish(lease, {"webhook-id": f"msg_{n}"}, datetime.now(UTC)))
        took.append(time.monotonic() - started)

    threads = [threading.Thread(target=attempt, args=(n,)) for n in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        sender.close()
        silent.close()
    assert len(took) == 8
    assert max(took) < 2 * 1 + LEASE_MARGIN, took  # every attempt ends inside its lease
    assert all(r.error and r.error.startswith(("timeout", "connect")) for r in results), [r.error for r in results]
