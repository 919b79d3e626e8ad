"""Deliveries of one kind through the real WSGI app (the catalogue's endpoints): ten identical
deliveries at once, and a refused one, each with what the database holds afterwards."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from flask import Flask

from tests.conftest import base_config, make_app, rows
from tests.support.catalogue import HOST, all_endpoints


def kinds_app(request: pytest.FixtureRequest) -> Flask:
    """Every catalogue endpoint, on SQLite or on PostgreSQL + Redis (``request.param``)."""
    if request.param == "sqlite":
        config = base_config(request.getfixturevalue("sqlite_url"))
    else:
        config = base_config(request.getfixturevalue("pg_url"), REDIS_URL=request.getfixturevalue("redis_url"))
    config["ENDPOINTS"] = all_endpoints()
    return make_app(config)


def post(app: Flask, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    response = app.test_client().post(path, data=body, headers=headers, base_url=f"https://{HOST}")
    return response.status_code, response.get_json(silent=True)


def at_once(app: Flask, path: str, body: bytes, headers: dict[str, str], n: int = 10) -> list[int]:
    """``n`` identical deliveries released together; their status codes."""
    barrier = threading.Barrier(n)
    codes: list[int] = []

    def one() -> None:
        barrier.wait(timeout=30)
        codes.append(post(app, path, body, headers)[0])

    threads = [threading.Thread(target=one) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return codes


def stored(app: Flask, name: str) -> list[tuple[str, str]]:
    """(event id, type) of every event stored for endpoint ``name``."""
    return [(r[0], r[1]) for r in rows(app, "SELECT event_id, event_type FROM events WHERE endpoint = :e", e=name)]
