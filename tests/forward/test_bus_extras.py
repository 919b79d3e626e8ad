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
    "kafka": ("confluent_kafka", {"bootstrap_servers": "127.0.0.1:9092", "topic": "t"}),
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
    for client in ("pika", "nats", "boto3", "confluent_kafka"):
        monkeypatch.setitem(sys.modules, client, None)
    redis = {"kind": "redis-stream", "url": "redis://127.0.0.1:6390/0", "stream": "s"}
    assert load_bus(redis | {"secrets": [destination.SECRET], "allow_private": True}).destinations["bus"]


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_a_process_without_the_client_refuses_a_stored_bus_destination_alone(
    db: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seam with live configuration: a destination created through the admin API by a process
    with the extra installed, read by a process (an image) without it. The second one's API refuses
    new ones with the same line (400 invalid_config); its snapshot leaves the stored one out, and
    every other item stays."""
    from tests.admin.test_runtime_config import DEST_SECRET, SHOP, api, config
    from tests.conftest import make_app

    settings = config(request, db)
    with_extra = make_app(settings)
    body = {"name": "orders-mq", "secrets": [DEST_SECRET]} | {
        k: v for k, v in table("rabbitmq").items() if k != "secrets"
    }
    assert api(with_extra.test_client(), "POST", "/destinations", body).status_code == 201
    assert api(with_extra.test_client(), "POST", "/endpoints", SHOP).status_code == 201

    monkeypatch.setitem(sys.modules, "pika", None)  # the other process: installed without webhooks[rabbitmq]
    without = make_app(settings)
    refused = api(without.test_client(), "POST", "/destinations", body | {"name": "orders-mq-2"})
    assert refused.status_code == 400 and refused.get_json()["error"] == "invalid_config"
    assert "pip install 'webhooks[rabbitmq]'" in str(refused.get_json()), refused.get_json()
    live = without.extensions["webhooks"].settings
    assert "orders-mq" not in live.destinations and "shop-eu" in live.endpoints
