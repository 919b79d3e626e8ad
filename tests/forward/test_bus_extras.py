"""The bus destinations' clients are extras (#40: the default image carries none it does not need):
a destination of a kind whose client is not installed is refused at load, naming the extra to add."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from tests.forward.conftest import load_bus, refused
from tests.support import destination

TABLES: dict[str, tuple[str, dict[str, Any]]] = {
    "rabbitmq": ("pika", {"url": "amqp://127.0.0.1:5672/%2F", "exchange": "x", "routing_key": "k"}),
    "nats": ("nats", {"url": "nats://127.0.0.1:4222", "subject": "s"}),
    "sqs": ("boto3", {"queue_url": "http://127.0.0.1:4566/000000000000/q", "region": "us-east-1"}),
}


def table(kind: str) -> dict[str, Any]:
    return {"kind": kind, **TABLES[kind][1], "secrets": [destination.SECRET], "allow_private": True}


@pytest.mark.parametrize("kind", sorted(TABLES))
def test_a_bus_kind_without_its_client_is_refused_with_the_extra_to_install(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = TABLES[kind][0]
    assert load_bus(table(kind)).destinations["bus"].kind == kind  # installed (the test extra): accepted
    monkeypatch.setitem(sys.modules, client, None)  # as if not installed: importlib finds no spec
    assert refused(table(kind)) == f"destination 'bus': kind {kind} needs {client}: pip install 'webhooks[{kind}]'"


def test_http_and_redis_streams_need_no_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for client in ("pika", "nats", "boto3"):
        monkeypatch.setitem(sys.modules, client, None)
    redis = {"kind": "redis-stream", "url": "redis://127.0.0.1:6390/0", "stream": "s"}
    assert load_bus(redis | {"secrets": [destination.SECRET], "allow_private": True}).destinations["bus"]
