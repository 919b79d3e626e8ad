"""``examples/orders`` behind the real forwarder: Stripe events verified, stored, forwarded,
verified again by the example with the ``standardwebhooks`` SDK and applied once each."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from werkzeug.serving import make_server

from tests.conftest import ROOT, base_config, drain, make_app, runtime, stripe_event, stripe_headers
from tests.support.destination import SECRET
from tests.support.servers import serve_in_thread
from webhooks.forward import deliveries
from webhooks.forward.dispatcher import Forwarder
from webhooks.forward.dispatcher import drain as drain_forwarder


@pytest.fixture
def orders(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    """The example service on 127.0.0.1 (its own thread); yields its webhook URL."""
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    from orders.app import create_app

    server = make_server("127.0.0.1", 0, create_app([SECRET], str(tmp_path / "orders.db")), threaded=True)
    serve_in_thread(server)
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()


def test_the_example_applies_each_forwarded_event_once(sqlite_url: str, orders: str, tmp_path: Path) -> None:
    import requests

    database = tmp_path / "orders.db"

    destinations = {"orders": {"url": f"{orders}/webhooks", "secrets": [SECRET], "allow_private": True}}
    config = base_config(sqlite_url, DESTINATIONS=destinations)
    config["ENDPOINTS"]["stripe"]["forward"] = ["orders"]
    app = make_app(config)
    client = app.test_client()
    sent = []
    for n in range(3):
        obj = {"id": "pi_ex", "object": "payment_intent", "status": f"step{n}"}
        body = stripe_event(f"evt_ex_{n}", created=1_700_000_000 + n, obj=obj)
        sent.append(body)
        for _ in range(2):  # Stripe retries: a duplicate is stored once and forwarded once
            assert client.post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200
    drain(app)
    rt = runtime(app)
    forwarder = Forwarder(rt.sessions, rt.settings.destinations)
    try:
        drain_forwarder(forwarder)
        # A replay of every delivery re-sends the same webhook-ids: the example answers duplicate.
        with rt.sessions.begin() as session:
            keys = [("stripe", f"evt_ex_{n}") for n in range(3)]
            assert len(deliveries.replay(session, keys, "orders", datetime.now(UTC))) == 3
        drain_forwarder(forwarder)
    finally:
        forwarder.stop()
    applied = requests.get(f"{orders}/applied", timeout=10).json()
    assert sorted(a["event_id"] for a in applied) == ["evt_ex_0", "evt_ex_1", "evt_ex_2"]
    assert len({a["idempotency_key"] for a in applied}) == 3
    with rt.engine.connect() as conn:
        outcomes = [row[0] for row in conn.exec_driver_sql("SELECT outcome FROM delivery_attempts")]
    assert outcomes.count("delivered") == 6  # each sent twice, applied once
    with sqlite3.connect(database) as db:
        [(state,)] = db.execute("SELECT state FROM orders WHERE object = 'payment_intent/pi_ex'").fetchall()
    assert state.encode() == sent[-1]  # the newest version's body, whatever order they came in
