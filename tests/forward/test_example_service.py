"""``examples/orders``: the example destination verifies with the ``standardwebhooks`` SDK, applies
each webhook-id once, and never lets an older version of an object overwrite a newer one.

Every request is signed by the SDK itself (``Webhook(secret).sign``) through one helper; each
negative case derives from it.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from standardwebhooks.webhooks import Webhook

from tests.conftest import ROOT

KEY = base64.b64encode(b"orders-example-secret-32-bytes!!").decode()
SECRET = f"whsec_{KEY}"
NEXT_SECRET = "whsec_" + base64.b64encode(b"orders-example-rotated-secret-32").decode()
Make = Callable[..., Flask]


@pytest.fixture
def database(tmp_path: Path) -> Path:
    return tmp_path / "orders.db"


@pytest.fixture
def make(monkeypatch: pytest.MonkeyPatch, database: Path) -> Make:
    """``create_app`` of the example, imported as its README runs it (``examples/`` on the path)."""
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    from orders.app import create_app

    def make(secrets: list[str] | str = SECRET) -> Flask:
        return create_app(secrets, str(database))

    return make


@pytest.fixture
def app(make: Make) -> Flask:
    return make()


def event(status: str = "processing", *, event_id: str = "evt_1") -> bytes:
    obj = {"id": "pi_123", "object": "payment_intent", "status": status}
    return json.dumps({"id": event_id, "type": f"payment_intent.{status}", "data": {"object": obj}}).encode()


def signed(
    body: bytes, *, msg_id: str = "msg_1", version: int = 1, secret: str = SECRET, at: datetime | None = None
) -> dict[str, str]:
    """The headers the forwarder sends, signed correctly by the SDK."""
    at = at or datetime.now(UTC)
    payload = json.loads(body)
    return {
        "Content-Type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, at, body.decode()),
        "Idempotency-Key": msg_id,
        "Webhooks-Endpoint": "stripe",
        "Webhooks-Event-Id": payload["id"],
        "Webhooks-Event-Type": payload["type"],
        "Webhooks-Object": "payment_intent/pi_123",
        "Webhooks-Object-Version": str(version),
    }


def post(app: Flask, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    response = app.test_client().post("/webhooks", data=body, headers=headers)
    return response.status_code, response.get_json()


def applied(app: Flask) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = app.test_client().get("/applied").get_json()
    return rows


def orders(database: Path) -> dict[str, tuple[int, Any]]:
    with sqlite3.connect(database) as connection:
        return {o: (v, json.loads(s)) for o, v, s in connection.execute("SELECT object, version, state FROM orders")}


def test_a_signed_event_is_applied_and_its_order_stored(app: Flask, database: Path) -> None:
    body = event()
    assert post(app, body, signed(body)) == (200, {"status": "applied"})
    [row] = applied(app)
    assert {k: v for k, v in row.items() if k != "received_at"} == {
        "idempotency_key": "msg_1",
        "event_id": "evt_1",
        "event_type": "payment_intent.processing",
        "object": "payment_intent/pi_123",
        "version": 1,
    }
    assert orders(database) == {"payment_intent/pi_123": (1, json.loads(body))}
    with sqlite3.connect(database) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_the_same_webhook_id_again_is_a_duplicate_applied_once(app: Flask) -> None:
    body = event()
    assert post(app, body, signed(body))[1] == {"status": "applied"}
    retry = signed(body, at=datetime.now(UTC) - timedelta(seconds=30))  # a retry: new timestamp, same id
    assert post(app, body, retry) == (200, {"status": "duplicate"})
    assert post(app, body, signed(body)) == (200, {"status": "duplicate"})
    assert [r["idempotency_key"] for r in applied(app)] == ["msg_1"]


def test_concurrent_copies_of_one_delivery_are_applied_once(app: Flask) -> None:
    body = event()
    answers: list[Any] = []
    threads = [threading.Thread(target=lambda: answers.append(post(app, body, signed(body))[1])) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(a["status"] for a in answers) == ["applied"] + ["duplicate"] * 5
    assert len(applied(app)) == 1


def _tampered(body: bytes, headers: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    return body.replace(b"processing", b"succeeded"), headers


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(_tampered, id="tampered-body"),
        pytest.param(lambda b, h: (b, {**h, "webhook-id": "msg_2", "Idempotency-Key": "msg_2"}), id="other-id"),
        pytest.param(lambda b, h: (b, signed(b, secret=NEXT_SECRET)), id="other-secret"),
        pytest.param(lambda b, h: (b, signed(b, at=datetime.now(UTC) - timedelta(minutes=10))), id="too-old"),
        pytest.param(lambda b, h: (b, {k: v for k, v in h.items() if k != "webhook-signature"}), id="unsigned"),
        pytest.param(lambda b, h: (b, {**h, "webhook-signature": "v1"}), id="malformed-signature"),
        pytest.param(lambda b, h: (b"\xff" + b, h), id="not-utf8"),
    ],
)
def test_a_bad_signature_is_rejected_and_nothing_stored(
    app: Flask, database: Path, change: Callable[[bytes, dict[str, str]], tuple[bytes, dict[str, str]]]
) -> None:
    body, headers = change(event(), signed(event()))
    assert post(app, body, headers) == (400, {"error": "bad_signature"})
    assert applied(app) == []
    assert orders(database) == {}


def test_an_idempotency_key_other_than_the_signed_webhook_id_is_rejected(app: Flask) -> None:
    body = event()
    assert post(app, body, {**signed(body), "Idempotency-Key": "msg_other"}) == (
        400,
        {"error": "idempotency_key_mismatch"},
    )
    assert applied(app) == []


@pytest.mark.parametrize("secrets", [[SECRET, NEXT_SECRET], f"{SECRET}, {NEXT_SECRET}"], ids=["list", "env-string"])
def test_during_a_rotation_either_secret_verifies(make: Make, secrets: list[str] | str) -> None:
    app = make(secrets)
    first, second = event(event_id="evt_1"), event(event_id="evt_2")
    assert post(app, second, signed(second, msg_id="msg_2", secret=NEXT_SECRET))[1] == {"status": "applied"}
    assert post(app, first, signed(first, msg_id="msg_1", secret=SECRET))[1] == {"status": "applied"}
    # The forwarder sends one signature per secret, space-separated; an unknown one is skipped.
    third = event(event_id="evt_3")
    unknown = Webhook("whsec_" + base64.b64encode(b"x" * 32).decode()).sign("msg_3", datetime.now(UTC), third.decode())
    headers = signed(third, msg_id="msg_3", secret=NEXT_SECRET)
    headers["webhook-signature"] = f"{unknown} {headers['webhook-signature']}"
    assert post(app, third, headers)[1] == {"status": "applied"}
    assert [r["idempotency_key"] for r in applied(app)] == ["msg_2", "msg_1", "msg_3"]  # insertion order
    assert post(make(NEXT_SECRET), first, signed(first, msg_id="msg_4"))[0] == 400  # the retired secret alone fails


def test_an_older_version_after_a_newer_one_leaves_the_newer_state(app: Flask, database: Path) -> None:
    v1, v2, v3 = event("processing", event_id="evt_1"), event("succeeded", event_id="evt_2"), event("refunded")
    assert post(app, v2, signed(v2, msg_id="msg_2", version=2))[1] == {"status": "applied"}
    assert post(app, v1, signed(v1, msg_id="msg_1", version=1))[1] == {"status": "applied"}  # late, older
    assert orders(database) == {"payment_intent/pi_123": (2, json.loads(v2))}
    assert post(app, v3, signed(v3, msg_id="msg_3", version=3))[1] == {"status": "applied"}
    assert orders(database) == {"payment_intent/pi_123": (3, json.loads(v3))}
    assert [(r["idempotency_key"], r["version"]) for r in applied(app)] == [("msg_2", 2), ("msg_1", 1), ("msg_3", 3)]


def test_the_applied_row_and_the_order_commit_together(app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    """An apply step that fails leaves no applied row behind: the retry applies it, not ``duplicate``."""
    from orders import app as orders_app

    body = event()
    with monkeypatch.context() as patch:
        patch.setattr(orders_app, "UPSERT_ORDER", "INSERT INTO no_such_table VALUES (?, ?, ?)")
        assert post(app, body, signed(body))[0] == 500
    assert applied(app) == []
    assert post(app, body, signed(body))[1] == {"status": "applied"}


@pytest.mark.parametrize("configured", [SECRET, KEY], ids=["whsec-prefixed", "bare-base64"])
def test_a_whsec_secret_verifies_in_either_form(make: Make, configured: str) -> None:
    app = make([configured])
    body = event()
    assert post(app, body, signed(body, secret=SECRET))[1] == {"status": "applied"}
    assert post(app, body, signed(body, msg_id="msg_2", secret=KEY))[1] == {"status": "applied"}


@pytest.mark.parametrize("secrets", [[], "", " , "])
def test_no_secret_is_refused_at_start(make: Make, secrets: list[str] | str) -> None:
    with pytest.raises(ValueError, match="secret"):
        make(secrets)
