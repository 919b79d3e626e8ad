"""Realistic rows for ``scale.py``, made by the database itself: one ``INSERT … SELECT`` over a
``generate_series`` chunk (PostgreSQL) or a recursive CTE (SQLite) per kind, never a row at a time.

Row ``i`` of ``n`` is received at ``now − 400 days × (n − i) / n`` (so the newest are the last) and
belongs to a kind by ``i % 100`` (``SHARES``); its payload is that kind's captured test payload
(``tests/payloads/<kind>/``) with the id written in, so sizes are real. Status by ``i % 1000``:
0.5 % failed, 1.5 % ignored, the rest processed, but for the newest ``LIVE`` rows (received /
queued / processing: the live tail). Each finished event has one attempt row; each event with an
object leaves its object (Adyen payments one in ``GAP_EVERY`` with ``gap: true``); one in
``DUP_EVERY`` has a ``duplicates`` row; Adyen events come two to a batch body kept in ``bodies``;
a tenth of the ``stripe`` endpoint's events have a delivery to ``DESTINATION`` and its attempt.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

SPAN = timedelta(days=400)
LIVE = 200  # the newest rows: not yet finished (as many in the empty database: same backlog)
GAP_EVERY = 50
DUP_EVERY = 50
DESTINATION = "orders"
PAYLOADS = Path(__file__).resolve().parent.parent / "tests" / "payloads"
ADYEN_KEY = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
SECRETS = {"stripe": "whsec_bench", "adyen": ADYEN_KEY, "standard": "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"}


@dataclass(frozen=True)
class Kind:
    endpoint: str
    kind: str
    shares: tuple[int, int]  # ``i % 100`` in [lo, hi)
    types: tuple[str, ...]
    payload: str  # a file under tests/payloads/
    id_sql: str  # the event id from ``i`` (``{i}``)
    object_type: str | None
    object_sql: str | None  # the object id from ``i``
    headers: dict[str, str]


def _pad(width: int) -> str:
    return f"lpad({{i}}::text, {width}, '0')"


KINDS = (
    Kind(
        "stripe",
        "stripe",
        (0, 30),
        ("payment_intent.succeeded", "charge.refunded", "invoice.paid", "charge.succeeded"),
        "stripe/payment_intent.succeeded__basic.json",
        f"'evt_1Sc' || {_pad(17)}",
        "payment_intent",
        "'pi_3Sc' || lpad(({i} / 3)::text, 17, '0')",
        {
            "Stripe-Signature": "t=1733000000,v1=" + "ab" * 32,
            "User-Agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
        },
    ),
    Kind(
        "stripe_eu",
        "stripe",
        (30, 40),
        ("charge.refunded", "customer.updated"),
        "stripe/charge.refunded__partial.json",
        f"'evt_1Eu' || {_pad(17)}",
        "charge",
        "'ch_3Eu' || lpad(({i} / 2)::text, 17, '0')",
        {
            "Stripe-Signature": "t=1733000000,v1=" + "cd" * 32,
            "User-Agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
        },
    ),
    Kind(
        "adyen",
        "adyen",
        (40, 60),
        ("AUTHORISATION", "CAPTURE", "REFUND"),
        "adyen/CAPTURE__batch.json",
        "'PSP' || lpad(({i} / 4)::text, 13, '0') || ':' || {type} || chr(58) || (({i}) % 4)::text",
        "payment",
        "'PSP' || lpad(({i} / 4)::text, 13, '0')",
        {},
    ),
    Kind(
        "github",
        "github",
        (60, 75),
        ("issues", "push", "pull_request"),
        "github/push__main.json",
        "'d6a0e6f0-' || lpad(to_hex({i}), 12, '0')",
        None,
        None,
        {
            "X-GitHub-Event": "push",
            "X-Hub-Signature-256": "sha256=" + "ef" * 32,
            "User-Agent": "GitHub-Hookshot/abc1234",
        },
    ),
    Kind(
        "shopify",
        "shopify",
        (75, 90),
        ("orders/paid", "orders/updated", "products/update"),
        "shopify/orders_paid__basic.json",
        f"'b54557e4-bdd9-4b37-8a5f-' || {_pad(12)}",
        "order",
        "lpad(({i} / 2)::text, 13, '8')",
        {
            "X-Shopify-Topic": "orders/paid",
            "X-Shopify-Hmac-Sha256": "a" * 43 + "=",
            "X-Shopify-Shop-Domain": "shop.myshopify.com",
        },
    ),
    Kind(
        "standard",
        "standard",
        (90, 100),
        ("user.created", "invoice.paid"),
        "standard/user.created__spec_example.json",
        f"'msg_2Kw' || {_pad(20)}",
        None,
        None,
        {"webhook-id": "msg_x", "webhook-timestamp": "1733000000", "webhook-signature": "v1," + "b" * 44},
    ),
)


def adyen_item() -> str:
    """One NotificationRequestItem of the batch payload: what an Adyen event's own row keeps."""
    body = json.loads((PAYLOADS / "adyen/CAPTURE__batch.json").read_text())
    return json.dumps(body["notificationItems"][0])


def template(kind: Kind) -> str:
    """The kind's payload with ``{{ID}}`` where its id goes (sizes stay those of the real payload)."""
    if kind.kind == "adyen":
        return adyen_item().replace("V4HZ4RBFJGXXGN82", "{{ID}}")
    raw = json.loads((PAYLOADS / kind.payload).read_text())
    if isinstance(raw, dict):
        raw["id"] = "{{ID}}"
    return json.dumps(raw)


def config_file(work: Path, forward: bool = True) -> Path:
    """The endpoints of the fill and (``forward``) a destination the ``stripe`` endpoint forwards to."""
    lines = []
    for kind in KINDS:
        secret = SECRETS.get(kind.kind, f"{kind.kind}-bench-secret")
        lines += [f"[endpoints.{kind.endpoint}]", f'provider = "{kind.kind}"', f'secrets = ["{secret}"]']
        if forward and kind.endpoint == "stripe":
            lines.append('forward = ["orders"]')
    if not forward:
        path = work / "webhooks-sqlite.toml"
        path.write_text("\n".join(lines) + "\n")
        return path
    lines += [
        "[destinations.orders]",
        'url = "http://127.0.0.1:9/orders"',
        "allow_private = true",
        f'secrets = ["{SECRETS["standard"]}"]',
    ]
    path = work / "webhooks.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


# -- PostgreSQL ------------------------------------------------------------------------------

STATUS_SQL = (
    "CASE WHEN i > {n} - {live} THEN (ARRAY['received','queued','processing'])[i % 3 + 1]"
    " WHEN i % 1000 < 5 THEN 'failed' WHEN i % 1000 < 20 THEN 'ignored' ELSE 'processed' END"
)


def _kind_insert(kind: Kind, n: int) -> str:
    """One statement: this kind's events of a chunk, with their attempts, objects, duplicates and
    (stripe) deliveries, from ``generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint))``."""
    types = "ARRAY[" + ",".join(f"'{t}'" for t in kind.types) + "]"
    etype = f"({types})[i % {len(kind.types)} + 1]"
    ident = kind.id_sql.format(i="i", type=etype)
    obj = kind.object_sql.format(i="i") if kind.object_sql else "NULL"
    adyen = kind.kind == "adyen"
    digest = "md5('b' || (i / 2)::text) || md5('c' || (i / 2)::text)" if adyen else "NULL"
    reference = "'order-' || (i / 4)::text" if adyen else "NULL"
    status = STATUS_SQL.format(n=n, live=min(LIVE, n // 5))
    lo, hi = kind.shares
    return f"""
WITH rows AS (
  SELECT i, {ident} AS event_id, {etype} AS event_type, {status} AS status,
         CAST(:now AS timestamptz) - CAST(:span AS interval) * (({n} - i)::float / {n}) AS at, {obj} AS object_id
  FROM generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint)) AS i WHERE i % 100 >= {lo} AND i % 100 < {hi}
), ev AS (
  INSERT INTO events (endpoint, event_id, kind, event_type, status, attempts, received_at, status_at,
                      processed_at, object_type, object_id, object_version, payload, item_index, headers,
                      body_digest, scheme, secret_index, signed_at, last_error, last_traceback, reference, replay_key)
  SELECT '{kind.endpoint}', event_id, '{kind.kind}', event_type, status,
         CASE WHEN status = 'failed' THEN 5 WHEN status IN ('received', 'queued') THEN 0 ELSE 1 END,
         at, at + interval '40 ms', CASE WHEN status IN ('processed', 'ignored') THEN at + interval '40 ms' END,
         {"'" + kind.object_type + "'" if kind.object_type else "NULL"}, object_id,
         {"i" if kind.object_type else "NULL"},
         convert_to(replace(:payload, '{{{{ID}}}}', event_id), 'UTF8'),
         {"i % 2" if adyen else "NULL"}, {"'{}'::jsonb" if adyen else ":headers ::jsonb"}, {digest},
         '{kind.kind}', 0, extract(epoch FROM at)::bigint,
         CASE WHEN status = 'failed' THEN 'HandlerError: upstream answered 503' END,
         CASE WHEN status = 'failed' THEN repeat('Traceback (most recent call last): line 12' || chr(10), 12) END,
         {reference}, NULL
  FROM rows
  RETURNING endpoint, event_id, status, received_at, object_type, object_id, object_version, reference
), att AS (
  INSERT INTO attempts (endpoint, event_id, number, started_at, finished_at, status, error, handlers)
  SELECT endpoint, event_id, 1, received_at + interval '5 ms', received_at + interval '40 ms',
         CASE status WHEN 'failed' THEN 'error' ELSE status END,
         CASE WHEN status = 'failed' THEN 'HandlerError: upstream answered 503' END,
         CASE WHEN status = 'failed' THEN NULL ELSE '["app.handlers.on_event"]'::jsonb END
  FROM ev WHERE status IN ('processed', 'ignored', 'failed')
), obj AS (
  INSERT INTO objects (endpoint, object_type, object_id, version, state, last_event_id, updated_at)
  SELECT DISTINCT ON (object_id) endpoint, object_type, object_id, object_version,
         jsonb_build_object('id', object_id, 'status', 'succeeded', 'amount', 2000, 'currency', 'eur',
                            'merchantReference', reference, 'applied', jsonb_build_array(event_id),
                            'gap', {f"hashtext(object_id) % {GAP_EVERY} = 0" if adyen else "false"}),
         event_id, received_at
  FROM ev WHERE object_id IS NOT NULL ORDER BY object_id, object_version DESC
  ON CONFLICT DO NOTHING
), dup AS (
  INSERT INTO duplicates (endpoint, event_id, count, last_at)
  SELECT endpoint, event_id, 1 + length(event_id) % 3, received_at + interval '1 minute'
  FROM ev WHERE hashtext(event_id) % {DUP_EVERY} = 0
){_deliveries(kind)}
SELECT count(*) FROM ev"""


def _deliveries(kind: Kind) -> str:
    if kind.endpoint != "stripe":
        return ""
    mine = "FROM ev WHERE hashtext(event_id) % 10 = 1 AND status IN ('processed', 'ignored', 'failed')"
    return f""", dl AS (
  INSERT INTO deliveries (endpoint, event_id, destination, message_id, status, event_type, object_type, object_id,
                          object_version, forced, attempts, lease, next_attempt_at, created_at, status_at,
                          delivered_at, last_status_code)
  SELECT endpoint, event_id, '{DESTINATION}', md5(event_id), CASE WHEN status = 'failed' THEN 'failed'
         ELSE 'delivered' END, 'payment_intent.succeeded', object_type, object_id, object_version, false, 1, 1,
         received_at, received_at, received_at + interval '90 ms', received_at + interval '90 ms', 200
  {mine}
), da AS (
  INSERT INTO delivery_attempts (endpoint, event_id, destination, number, started_at, seconds, outcome,
                                 status_code, response)
  SELECT endpoint, event_id, '{DESTINATION}', 1, received_at + interval '50 ms', 0.04, 'delivered', 200, 'ok'
  {mine}
)"""


BODIES = """
INSERT INTO bodies (endpoint, digest, body, headers, received_at)
SELECT 'adyen', md5('b' || (i / 2)::text) || md5('c' || (i / 2)::text), convert_to(:body, 'UTF8'), :headers ::jsonb,
       CAST(:now AS timestamptz) - CAST(:span AS interval) * (({n} - i)::float / {n})
FROM generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint)) AS i WHERE i % 100 >= 40 AND i % 100 < 60 AND i % 2 = 0
ON CONFLICT DO NOTHING"""

EXTRAS = """
INSERT INTO tombstones (endpoint, event_id, replay_key, purged_at)
SELECT 'stripe', 'evt_1Purged' || lpad(i::text, 14, '0'), NULL, :now - interval '1 day' * (i % 300)
FROM generate_series(1, {tombstones}) AS i;
INSERT INTO rejections (endpoint, kind, reason, detail, http_status, received_at, url, headers, body, outcome,
                        basic_auth_ok)
SELECT (ARRAY['stripe','adyen','github','nope'])[i % 4 + 1], 'stripe',
       (ARRAY['bad_signature','stale_timestamp','unknown_endpoint'])[i % 3 + 1], 'signature did not match', 400,
       :now - interval '1 minute' * i, '/webhooks/stripe', '{{"Content-Type": "application/json"}}'::jsonb,
       convert_to(repeat('{{"id": "evt_forged"}}', 25), 'UTF8'), NULL, false
FROM generate_series(1, {rejections}) AS i;
INSERT INTO rejection_counts (endpoint, reason, count, last_at)
SELECT endpoint, reason, count(*), max(received_at) FROM rejections GROUP BY endpoint, reason;
INSERT INTO destinations (name, paused, failures, last_success_at) VALUES ('{destination}', false, 0, :now)"""

BIG = ("events", "attempts", "objects", "duplicates", "bodies", "deliveries", "delivery_attempts")


def _secondary_indexes(conn: sa.Connection) -> list[tuple[str, str]]:
    """The big tables' indexes that are neither primary keys nor unique: dropped for the fill and
    made again after from their own definitions (``pg_indexes``), so the schema stays the head's."""
    rows = conn.execute(
        sa.text(
            "SELECT i.indexname, i.indexdef FROM pg_indexes i JOIN pg_class c ON c.relname = i.indexname "
            "JOIN pg_index x ON x.indexrelid = c.oid WHERE i.tablename = ANY(:tables) "
            "AND NOT x.indisprimary AND NOT x.indisunique"
        ),
        {"tables": list(BIG)},
    )
    return [(name, definition) for name, definition in rows]


def fill_pg(url: str, n: int, now: datetime, chunk: int = 100_000) -> dict[str, Any]:
    """``n`` events and their rows; returns timings. Triggers are off for the fill's session
    (``session_replication_role``: no row collides with a tombstone by construction)."""
    engine = sa.create_engine(url)
    started = time.monotonic()
    item = json.loads(adyen_item())
    body = json.dumps({"live": "false", "notificationItems": [{"NotificationRequestItem": item}] * 2})
    try:
        with engine.begin() as conn:
            indexes = _secondary_indexes(conn)
            for name, _ in indexes:
                conn.execute(sa.text(f'DROP INDEX "{name}"'))
        statements = [
            (sa.text(_kind_insert(k, n)), {"payload": template(k), "headers": json.dumps(k.headers)}) for k in KINDS
        ]
        for lo in range(1, n + 1, chunk):
            hi = min(n, lo + chunk - 1)
            with engine.begin() as conn:
                conn.execute(
                    sa.text("SET LOCAL session_replication_role = replica; SET LOCAL synchronous_commit = off")
                )
                for statement, params in statements:
                    conn.execute(statement, {**params, "lo": lo, "hi": hi, "now": now, "span": SPAN})
                conn.execute(
                    sa.text(BODIES.format(n=n)),
                    {
                        "body": body,
                        "headers": '{"Content-Type": "application/json"}',
                        "lo": lo,
                        "hi": hi,
                        "now": now,
                        "span": SPAN,
                    },
                )
        inserted = time.monotonic() - started
        with engine.begin() as conn:
            extras = EXTRAS.format(tombstones=max(1000, n // 20), rejections=3000, destination=DESTINATION)
            for statement in extras.split(";"):
                conn.execute(sa.text(statement), {"now": now})
            for _, definition in indexes:
                conn.execute(sa.text(definition))
        indexed = time.monotonic() - started - inserted
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("VACUUM ANALYZE"))
        counts = {t: engine.connect().execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one() for t in BIG}
    finally:
        engine.dispose()
    total = time.monotonic() - started
    return {
        "events": n,
        "seconds": round(total, 1),
        "insert_seconds": round(inserted, 1),
        "index_seconds": round(indexed, 1),
        "events_per_second": round(n / total),
        "rows": counts,
        "analyzed": "VACUUM ANALYZE after the fill",
    }


def utc_now() -> datetime:
    return datetime.now(UTC)
