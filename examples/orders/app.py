"""An example destination for forwarded events: verify, apply once, never let an older event win.

A team copies this next to its own service. ``POST /webhooks`` takes what ``webhooks`` forwards
(signed the Standard Webhooks way, one ``v1,`` signature per secret during rotation) and:

1. verifies the exact raw bytes with the ``standardwebhooks`` package, trying each secret, before
   parsing anything (400 ``bad_signature`` otherwise: the sender retries, an attacker learns nothing);
2. records the ``Idempotency-Key`` with ``INSERT OR IGNORE`` under a primary key, so a retry or a
   replay answers 200 ``duplicate`` and is applied once: the database settles races, no
   check-then-insert;
3. in the same transaction, keeps per ``Webhooks-Object`` the newest event's body as its state: an upsert that
   writes when ``Webhooks-Object-Version`` is higher than the stored one, so events may arrive in
   any order.

The signature covers ``webhook-id`` but no other header, so the idempotency key must equal it.
Run it with ``python -m orders.app`` from ``examples/`` (see the README).
"""

from __future__ import annotations

import json
import os
import sqlite3
from contextlib import closing
from datetime import UTC, datetime
from typing import Any

from flask import Flask, Response, jsonify, request
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

SCHEMA = """
CREATE TABLE IF NOT EXISTS applied (
    idempotency_key TEXT PRIMARY KEY, event_id TEXT, event_type TEXT, object TEXT, version INTEGER, received_at TEXT
);
CREATE TABLE IF NOT EXISTS orders (object TEXT PRIMARY KEY, version INTEGER NOT NULL, state JSON NOT NULL);
"""
# Written only when newer: a late, older event leaves the stored state alone.
UPSERT_ORDER = """
INSERT INTO orders (object, version, state) VALUES (?, ?, ?)
ON CONFLICT (object) DO UPDATE SET version = excluded.version, state = excluded.state
WHERE excluded.version > orders.version
"""


def connect(database: str) -> sqlite3.Connection:
    """One connection per request; transactions are begun explicitly (``isolation_level=None``)."""
    connection = sqlite3.connect(database, isolation_level=None, timeout=10)
    connection.row_factory = sqlite3.Row
    return connection


def verified(verifiers: list[Webhook], body: bytes, headers: dict[str, str]) -> bool:
    """Whether any secret's verifier accepts the body (the SDK also raises ValueError on malformed headers)."""
    for verifier in verifiers:
        try:
            verifier.verify(body, headers, json_parse=False)
            return True
        except (WebhookVerificationError, ValueError):
            continue
    return False


def error(code: str) -> tuple[Response, int]:
    return jsonify({"error": code}), 400


def create_app(secrets: list[str] | str, database: str = "orders.db") -> Flask:
    """The destination app; ``secrets`` is a list or a comma-separated string (rotation)."""
    names = [s.strip() for s in (secrets.split(",") if isinstance(secrets, str) else secrets) if s.strip()]
    if not names:
        raise ValueError("at least one secret is needed: an unsigned request is never applied")
    verifiers = [Webhook(secret) for secret in names]  # a malformed secret fails here, at start
    with closing(connect(database)) as connection:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.executescript(SCHEMA)
    app = Flask(__name__)

    @app.post("/webhooks")
    def receive() -> tuple[Response, int]:
        body, headers = request.get_data(), dict(request.headers)
        if not verified(verifiers, body, headers):
            return error("bad_signature")
        key = request.headers["webhook-id"]  # present: the signature covers it
        if request.headers.get("Idempotency-Key", key) != key:
            return error("idempotency_key_mismatch")
        obj = request.headers.get("Webhooks-Object")
        try:
            version = None if obj is None else int(request.headers["Webhooks-Object-Version"])
        except (KeyError, ValueError):
            return error("bad_object_version")
        try:
            json.loads(body)
        except ValueError:
            return error("bad_json")
        row = (
            key,
            request.headers.get("Webhooks-Event-Id"),
            request.headers.get("Webhooks-Event-Type"),
            obj,
            version,
            datetime.now(UTC).isoformat(),
        )
        # ``with connection`` commits the transaction BEGIN opened (or rolls it back on an error).
        with closing(connect(database)) as connection, connection:
            connection.execute("BEGIN IMMEDIATE")
            if not connection.execute("INSERT OR IGNORE INTO applied VALUES (?, ?, ?, ?, ?, ?)", row).rowcount:
                return jsonify({"status": "duplicate"}), 200
            if obj is not None:
                connection.execute(UPSERT_ORDER, (obj, version, body.decode()))
        return jsonify({"status": "applied"}), 200

    @app.get("/applied")
    def applied() -> Response:
        with closing(connect(database)) as connection:
            rows: list[dict[str, Any]] = [dict(r) for r in connection.execute("SELECT * FROM applied ORDER BY rowid")]
        return jsonify(rows)

    return app


def main() -> None:
    """Serve on 127.0.0.1 with Flask's development server: this is an example, not a deployment."""
    secrets = os.environ.get("ORDERS_WEBHOOK_SECRET", "")
    if not secrets.strip():
        raise SystemExit("ORDERS_WEBHOOK_SECRET is required (comma-separated during a rotation)")
    app = create_app(secrets, os.environ.get("ORDERS_DATABASE", "orders.db"))
    app.run(host="127.0.0.1", port=int(os.environ.get("ORDERS_PORT", "8001")))


if __name__ == "__main__":
    main()
