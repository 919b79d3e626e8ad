"""``kind = "nats"`` against a nats-server (JetStream on) of the suite's own (never the machine's
4222): every event arrives once as one stream message with its original bytes and a signature the
``standardwebhooks`` SDK verifies; an ordered destination's versions arrive in increasing order; a
re-send under the same ``webhook-id`` is dropped by the server (``Nats-Msg-Id``); a short
``duplicate_window`` is warned about; a server killed and restarted holds the deliveries ``pending``
and each arrives once after; configuration mistakes stop start-up with one line."""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import UTC, datetime
from typing import Any

import nats
import pytest
from nats.js.api import StreamConfig
from standardwebhooks.webhooks import Webhook

from tests.conftest import drain, rows, runtime, unavailable, wait_until
from tests.forward.conftest import (
    COPIES,
    EVENTS,
    HEADERS,
    bus_event,
    forwarding,
    forwarding_app,
    load_bus,
    post,
    refused,
    retried_while_down,
    settle_all,
    silent_attempts,
    statuses,
    versioned,
    wait_settled,
)
from tests.support import brokers, destination, servers
from webhooks.forward import deliveries
from webhooks.forward.signing import message_id


def table(server: brokers.Broker, subject: str, stream: str | None, **extra: Any) -> dict[str, Any]:
    """A ``[destinations.<name>]`` table for ``subject`` on ``server`` (loopback: ``allow_private``)."""
    stream_option = {"stream": stream} if stream else {}
    return {
        "kind": "nats",
        "url": server.url,
        "subject": subject,
        "secrets": [destination.SECRET],
        "allow_private": True,
        **stream_option,
        **extra,
    }


def made_stream(server: brokers.Broker, window: float = 120.0) -> tuple[str, str]:
    """A new file-stored stream holding one new subject: (stream, subject)."""
    name = f"S{uuid.uuid4().hex[:8]}"
    subject = f"webhooks.{name}"

    async def add() -> None:
        client = await nats.connect(server.url)
        try:
            await client.jetstream().add_stream(StreamConfig(name=name, subjects=[subject], duplicate_window=window))
        finally:
            await client.close()

    asyncio.run(add())
    return name, subject


def messages(server: brokers.Broker, stream: str) -> list[tuple[dict[str, str], bytes]]:
    """The stream's messages, oldest first, as (headers, payload), each verified with the SDK."""

    async def read() -> list[tuple[dict[str, str], bytes]]:
        client = await nats.connect(server.url)
        try:
            js = client.jetstream()
            state = (await js.stream_info(stream)).state
            found = []
            for seq in range(state.first_seq, state.last_seq + 1) if state.messages else ():
                msg = await js.get_msg(stream, seq)
                found.append((dict(msg.headers or {}), msg.data or b""))
            return found
        finally:
            await client.close()

    found = asyncio.run(read())
    for headers, body in found:
        Webhook(destination.SECRET).verify(body, headers)  # raises on a bad signature
    return found


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_every_event_arrives_once_with_its_bytes_and_a_verifiable_signature(
    request: pytest.FixtureRequest, db: str, nats_server: brokers.Broker
) -> None:
    stream, subject = made_stream(nats_server)
    app = forwarding_app(request, db, {"bus": table(nats_server, subject, stream)}, ["bus"])
    bodies = [bus_event(n) for n in range(EVENTS)]
    for body in bodies * COPIES:  # every event delivered three times by its provider
        assert post(app, body) == 200
    drain(app)
    settle_all(app)
    got = messages(nats_server, stream)
    assert len(got) == EVENTS
    assert sorted(body for _, body in got) == sorted(bodies)  # the bytes as received, once each
    by_event = {headers["webhooks-event-id"]: (headers, body) for headers, body in got}
    for n in range(EVENTS):
        headers, body = by_event[f"evt_{n}"]
        assert set(headers) == {*HEADERS, "Nats-Msg-Id", "Nats-Expected-Stream"}  # NATS keeps its own too
        assert body == bodies[n]
        assert headers["webhook-id"] == headers["Nats-Msg-Id"] == message_id("stripe", f"evt_{n}", "bus")
        assert headers["webhooks-object"] == f"payment_intent/pi_{n}"
        assert headers["content-type"] == "application/json"
        assert headers["webhooks-endpoint"] == "stripe" and headers["webhooks-event-type"] == "payment_intent.succeeded"
    assert set(statuses(app).values()) == {"delivered"} and len(statuses(app)) == EVENTS
    answers = rows(app, "SELECT response, outcome FROM delivery_attempts")
    assert {outcome for _, outcome in answers} == {"delivered"}
    assert {response for response, _ in answers} == {f"{stream} {seq}" for seq in range(1, EVENTS + 1)}


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_ordered_versions_arriving_shuffled_are_published_in_increasing_order(
    request: pytest.FixtureRequest, db: str, nats_server: brokers.Broker
) -> None:
    stream, subject = made_stream(nats_server)
    app = forwarding_app(request, db, {"bus": table(nats_server, subject, None, ordered=True)}, ["bus"])
    base = 1_700_000_000
    with forwarding(app):
        for v in (2, 0, 4, 1, 3):
            assert post(app, versioned(f"evt_{v}", "pi_x", base + v)) == 200
            drain(app)  # the forwarder meets the versions in this order
        wait_settled(app, 5)
    versions = [int(headers["webhooks-object-version"]) for headers, _ in messages(nats_server, stream)]
    assert versions == sorted(set(versions)), versions  # strictly increasing
    found = statuses(app)
    assert found["evt_4/bus"] == "delivered"
    assert len(versions) == sum(s == "delivered" for s in found.values())
    assert set(found.values()) <= {"delivered", "superseded"}


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_a_resend_under_the_same_webhook_id_is_dropped_by_the_server(
    request: pytest.FixtureRequest, db: str, nats_server: brokers.Broker
) -> None:
    stream, subject = made_stream(nats_server)
    app = forwarding_app(request, db, {"bus": table(nats_server, subject, stream)}, ["bus"])
    assert post(app, bus_event(1)) == 200
    drain(app)
    settle_all(app)
    with runtime(app).sessions.begin() as session:  # an operator's re-send: the same webhook-id
        assert len(deliveries.replay(session, [("stripe", "evt_1")], "bus", datetime.now(UTC))) == 1
    settle_all(app)
    assert statuses(app) == {"evt_1/bus": "delivered"}
    answers = sorted(str(r[0]) for r in rows(app, "SELECT response FROM delivery_attempts"))
    assert answers == [f"{stream} 1", f"{stream} 1 duplicate"]  # the server kept the first
    assert [body for _, body in messages(nats_server, stream)] == [bus_event(1)]


@pytest.mark.slow
def test_no_stream_for_the_subject_is_a_failed_attempt(
    request: pytest.FixtureRequest, nats_server: brokers.Broker
) -> None:
    app = forwarding_app(request, "sqlite", {"bus": table(nats_server, "nowhere.held", None)}, ["bus"])
    assert post(app, bus_event(2)) == 200
    drain(app)
    settle_all(app)
    assert statuses(app) == {"evt_2/bus": "pending"}
    [(error,)] = rows(app, "SELECT error FROM delivery_attempts")
    assert error.startswith("refused: no stream holds subject 'nowhere.held'"), error


@pytest.mark.slow
def test_a_duplicate_window_shorter_than_lease_and_first_retry_is_warned_about(
    request: pytest.FixtureRequest, nats_server: brokers.Broker, caplog: pytest.LogCaptureFixture
) -> None:
    stream, subject = made_stream(nats_server, window=10.0)  # the lease: 2 × 15 s + 5 s, then 5 s
    app = forwarding_app(request, "sqlite", {"bus": table(nats_server, subject, stream)}, ["bus"])
    assert post(app, bus_event(3)) == 200
    drain(app)
    with caplog.at_level(logging.WARNING, logger="webhooks.forward.jetstream"):
        settle_all(app)
    [line] = [r.getMessage() for r in caplog.records if r.name == "webhooks.forward.jetstream"]
    assert f"stream {stream} keeps message ids 10 s (duplicate_window)" in line and "(40 s)" in line
    assert statuses(app) == {"evt_3/bus": "delivered"}


@pytest.mark.slow
@pytest.mark.parametrize("db", ["postgres"])
def test_nats_killed_then_restarted_holds_deliveries_and_each_arrives_once(
    request: pytest.FixtureRequest, db: str
) -> None:
    try:
        server = brokers.NatsServer()
        server.start()
    except servers.Unavailable as exc:
        unavailable("NATS", exc)
    try:
        stream, subject = made_stream(server)
        dest = table(server, subject, stream, retry_schedule=[0.3] * 50, probe_seconds=0.3, circuit_failures=5)
        app = forwarding_app(request, db, {"bus": dest | {"timeout_seconds": 2}}, ["bus"])
        server.kill()  # SIGKILL: no shutdown, no goodbye
        for n in range(10):
            assert post(app, bus_event(n)) == 200
        drain(app)
        with forwarding(app):
            wait_until(lambda: len(rows(app, "SELECT 1 FROM delivery_attempts")) >= 10, timeout=90)
            retried_while_down(app)  # the circuit opened and its probes failed too: not a fixed sleep
            assert set(statuses(app).values()) == {"pending"}
            errors = {str(r[0]) for r in rows(app, "SELECT error FROM delivery_attempts")}
            assert all(e.startswith(("connect:", "timeout:")) for e in errors), errors
            server.start()  # the same port and store: the stream is back
            wait_settled(app, 10, timeout=120)
        got = messages(server, stream)
        ids = [headers["webhook-id"] for headers, _ in got]
        assert sorted(ids) == sorted(message_id("stripe", f"evt_{n}", "bus") for n in range(10))  # once each
        assert sorted(body for _, body in got) == sorted(bus_event(n) for n in range(10))
    finally:
        server.remove()


def bus_table(**extra: Any) -> dict[str, Any]:
    base = {"kind": "nats", "url": "nats://127.0.0.1:4223", "subject": "a.b", "secrets": [destination.SECRET]}
    return {**base, "allow_private": True, **extra}


@pytest.mark.parametrize(
    ("table", "words"),
    [
        (bus_table(subject=None), ["subject is required for destination kind nats"]),
        (bus_table(subject="a.*"), ["subject 'a.*' is not a subject to publish to"]),
        (bus_table(stream=""), ["stream must be a non-empty string"]),
        (bus_table(url="redis://127.0.0.1:4223"), ["url:", "nats:// or tls://, not redis"]),
        (bus_table(url="nats://127.0.0.1:4223/x"), ["url:", "scheme, host and port only"]),
        (bus_table(allow_private=False), ["url:", "127.0.0.1 is not a public address", "allow_private"]),
        (bus_table(exchange="x"), ["exchange is an option of destination kind rabbitmq, not nats"]),
        (bus_table(maxlen=5), ["maxlen is an option of destination kind redis-stream, not nats"]),
    ],
)  # fmt: skip
def test_configuration_mistakes_stop_start_up_in_one_line(table: dict[str, Any], words: list[str]) -> None:
    message = refused(table)
    for word in words:
        assert word in message, message


def test_credentials_are_allowed_in_the_url_and_shown_nowhere() -> None:
    url = "tls://worker:s3cret-pw@127.0.0.1:4223"
    bus = load_bus(bus_table(url=url, stream="S")).destinations["bus"]
    assert (bus.kind, bus.target, bus.url) == ("nats", "tls://***@127.0.0.1:4223", url)
    assert bus.bus is not None and (bus.bus.place, bus.bus.stream) == ("a.b", "S")
    assert "s3cret" not in repr(bus)


def test_a_silent_broker_never_holds_an_attempt_past_its_deadline() -> None:
    """Seams finding 7: a NATS address that accepts and never answers held every attempt behind one
    connect lock (attempts of 7.9-9.8 s against a 9 s lease; some never attempted). Eight attempts
    at once, each a timeout ending inside its own lease (2 x timeout + margin), none waiting on
    another's connect past its deadline."""
    from webhooks.configuration import settings as webhooks_config
    from webhooks.forward.jetstream import NatsPublisher
    from webhooks.guard import system_resolver

    def publisher(port: int) -> NatsPublisher:
        raw = {"kind": "nats", "url": f"nats://127.0.0.1:{port}", "subject": "s", "secrets": [destination.SECRET]}
        dest = webhooks_config.build_destination("bus", {**raw, "allow_private": True, "timeout_seconds": 1}, {})
        return NatsPublisher(dest, system_resolver)

    silent_attempts(publisher)
