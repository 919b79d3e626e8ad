"""Probes: ``/healthz`` answers while the process runs; ``/readyz`` is 200 only when the database
answers at the head schema revision and Redis answers, else 503 naming each failed check."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest
from alembic import command

from tests.conftest import base_config, free_port, make_app, rows, stripe_event, stripe_headers
from tests.faults.services import Redis
from webhooks import create_app
from webhooks.service.cli import alembic_config
from webhooks.tables import revisions


def test_healthz_needs_no_auth_and_no_database(tmp_path: Path) -> None:
    app = create_app(base_config(f"sqlite:///{tmp_path}/never-created.db"))
    response = app.test_client().get("/healthz")
    assert response.status_code == 200
    assert response.get_json() == {"status": "ok", "version": metadata.version("webhooks"), "config_version": 0}
    assert not (tmp_path / "never-created.db").exists()


def test_readyz_on_the_embedded_default_checks_the_database_only(sqlite_url: str) -> None:
    response = make_app(base_config(sqlite_url)).test_client().get("/readyz")
    assert response.status_code == 200
    assert response.get_json() == {"status": "ready", "checks": {"database": "ok"}}


def test_readyz_names_an_unmigrated_database(sqlite_url: str) -> None:
    for path in ("/readyz", "/readyz/receiving"):
        response = create_app(base_config(sqlite_url)).test_client().get(path)
        assert response.status_code == 503
        body = response.get_json()
        assert body["status"] == "unavailable"
        assert body["failed"] == {
            "database": f"database schema never migrated, head is {revisions.head()}: run `webhooks db upgrade`"
        }


def test_readyz_names_a_schema_behind_head(pg_url: str) -> None:
    app = make_app(base_config(pg_url))
    command.downgrade(alembic_config(pg_url), "0002")
    body = app.test_client().get("/readyz").get_json()
    assert (
        body["failed"]["database"] == f"database schema at 0002, head is {revisions.head()}: run `webhooks db upgrade`"
    )


@pytest.mark.slow
def test_readyz_names_redis_while_it_is_down_and_recovers(pg_url: str) -> None:
    redis = Redis()  # our own redis-server on a spare port: down until started
    app = make_app(base_config(pg_url, REDIS_URL=redis.url))
    client = app.test_client()
    down = client.get("/readyz")
    assert down.status_code == 503
    assert set(down.get_json()["failed"]) == {"redis"}
    assert "Redis unreachable" in down.get_json()["failed"]["redis"]
    # #40: what a load balancer asks (the Helm chart's readiness): receiving still works, so ready.
    receiving = client.get("/readyz/receiving")
    assert receiving.status_code == 200 and receiving.get_json()["status"] == "ready"
    assert receiving.get_json()["checks"]["redis"] == down.get_json()["failed"]["redis"]
    body = stripe_event("evt_while_redis_down")
    assert client.post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200
    assert rows(app, "SELECT status FROM events WHERE event_id = 'evt_while_redis_down'") == [("received",)]
    redis.start()
    try:
        up = client.get("/readyz")
        assert up.status_code == 200, up.get_json()
        assert up.get_json()["checks"] == {"database": "ok", "redis": "ok"}
    finally:
        redis.stop()
    assert client.get("/readyz").status_code == 503


def test_readyz_when_the_database_is_unreachable() -> None:
    url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/nothing"
    response = create_app(base_config(url)).test_client().get("/readyz")
    assert response.status_code == 503
    assert response.get_json()["failed"]["database"] == "database unreachable (OperationalError)"
