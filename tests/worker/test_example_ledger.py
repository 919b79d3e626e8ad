"""``examples/ledger`` end to end: signed deliveries through the receiver, the worker, the ledger."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from flask import Flask

from tests.conftest import ROOT, admin_headers, adyen_body, adyen_item, base_config, drain, make_app, stripe_headers


@pytest.fixture(params=["sqlite", "postgres"])
def ledger_app(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Flask]:
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    if request.param == "sqlite":
        config = base_config(request.getfixturevalue("sqlite_url"))
    else:
        config = base_config(request.getfixturevalue("pg_url"), REDIS_URL=request.getfixturevalue("redis_url"))
    config["WEBHOOKS_HANDLERS"] = "ledger.handlers"
    app = make_app(config)
    from ledger import handlers

    handlers.create_tables(app.extensions["webhooks"].engine)
    yield app
    sys.modules.pop("ledger.handlers", None)


def post(app: Flask, path: str, body: bytes, headers: dict[str, str]) -> None:
    assert app.test_client().post(path, data=body, headers=headers).status_code == 200


def test_ledger_books_stripe_and_adyen_payments_once(ledger_app: Flask) -> None:
    from ledger import handlers

    created = int(time.time()) - 600
    charge = {"id": "ch_ledger", "object": "charge", "amount": 5000, "amount_refunded": 0, "currency": "eur"}
    for n, (kind, obj) in enumerate(
        [("charge.succeeded", charge), ("charge.refunded", dict(charge, amount_refunded=1500))]
    ):
        body = json.dumps(
            {"id": f"evt_ledger{n}", "object": "event", "created": created + n, "type": kind, "data": {"object": obj}}
        ).encode()
        post(ledger_app, "/webhooks/stripe", body, stripe_headers(body))
    items = [
        adyen_item(psp="LREF", code="REFUND", original="LPAY", value=400, event_date="2024-01-01T12:00:00+01:00"),
        adyen_item(psp="LCAP", code="CAPTURE", original="LPAY", value=1130, event_date="2024-01-01T11:00:00+01:00"),
        adyen_item(psp="LPAY", code="AUTHORISATION", value=1130, event_date="2024-01-01T10:00:00+01:00"),
    ]  # refund first, authorisation last: the fold does not care
    for item in items:
        post(ledger_app, "/webhooks/adyen", adyen_body(item), {})
        drain(ledger_app)
    drain(ledger_app)
    replay = ledger_app.test_client().post(
        "/admin/api/events/stripe/evt_ledger0/replay", json={"reason": "audit"}, headers=admin_headers()
    )
    assert replay.status_code == 202
    drain(ledger_app)
    with ledger_app.extensions["webhooks"].engine.connect() as conn:
        assert handlers.balances(conn) == {"ch_ledger": 3500, "LPAY": 730}
        assert conn.execute(sa.select(sa.func.count()).select_from(handlers.entries)).scalar() == 4
