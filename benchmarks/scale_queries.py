"""The console's and the admin API's reads for ``scale.py``, through the product's own routes (the
Flask test client, HTTP Basic), timed over many runs; each route's SQL captured as it runs and
explained on the same database, so the plans are kept beside the numbers.
"""

from __future__ import annotations

import base64
import contextlib
import re
import statistics
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import sqlalchemy as sa
from flask import Flask

from webhooks.admin import queries

PLANS = Path(__file__).resolve().parent / "plans"
PASSWORD = "bench-admin"
AUTH = {"Authorization": "Basic " + base64.b64encode(f"admin:{PASSWORD}".encode()).decode()}
BUFFERS = re.compile(r"Buffers: shared(?: hit=(\d+))?(?: read=(\d+))?")


@contextlib.contextmanager
def captured(engine: sa.Engine) -> Iterator[list[tuple[str, Any]]]:
    """Every statement the engine sends inside the block, with its driver parameters."""
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "WITH")) and statement.strip() != "SELECT 1":
            seen.append((statement, params))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


def explain(engine: sa.Engine, statement: str, params: Any) -> str:
    """PostgreSQL: ``EXPLAIN (ANALYZE, BUFFERS)``; SQLite: ``EXPLAIN QUERY PLAN``."""
    pg = engine.dialect.name == "postgresql"
    prefix = "EXPLAIN (ANALYZE, BUFFERS) " if pg else "EXPLAIN QUERY PLAN "
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(prefix + statement, params).all()
    if pg:
        return "\n".join(r[0] for r in rows)
    return "\n".join(f"{r[0]:>4} {r[1]:>4} {r[-1]}" for r in rows)


def top_buffers(plan: str) -> int:
    """Shared blocks (hit + read) of a plan's top node: the whole statement's."""
    match = BUFFERS.search(plan)
    return sum(int(g or 0) for g in match.groups()) if match else 0


def plans(engine: sa.Engine, statements: list[tuple[str, Any]], path: Path | None) -> int:
    """Explain each statement (written to ``path``); the statements' shared blocks in all."""
    texts, blocks = [], 0
    for statement, params in statements:
        plan = explain(engine, statement, params)
        blocks += top_buffers(plan)
        texts.append(f"-- {statement.strip()}\n-- params: {params!r}\n{plan}\n")
    if path is not None:
        path.parent.mkdir(exist_ok=True)
        path.write_text("\n".join(texts))
    return blocks


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def cursor_at(engine: sa.Engine, offset: int, endpoint: str | None = None) -> str:
    """The cursor of the feed's row at ``offset`` (newest first): a page that deep, by seeking."""
    where = "WHERE endpoint = :endpoint" if endpoint else ""
    with engine.connect() as conn:
        row = conn.execute(
            sa.text(
                f"SELECT received_at, endpoint, event_id FROM events {where} "
                "ORDER BY received_at DESC, endpoint DESC, event_id DESC LIMIT 1 OFFSET :offset"
            ),
            {"offset": offset, "endpoint": endpoint},
        ).one()
    at = row[0] if isinstance(row[0], datetime) else datetime.fromisoformat(row[0]).replace(tzinfo=UTC)  # SQLite: text
    return queries.encode_cursor(SimpleNamespace(received_at=at, endpoint=row[1], event_id=row[2]))  # type: ignore[arg-type]


def samples(engine: sa.Engine) -> dict[str, str]:
    """Ids the detail and search routes look up: a stripe event from the middle of the table (with
    its object, attempt and, where there are deliveries, a delivery), an Adyen payment with a gap
    and its merchant reference."""
    pg = engine.dialect.name == "postgresql"
    reference = "state ->> 'merchantReference'" if pg else "json_extract(state, '$.merchantReference')"
    gap = "(state ->> 'gap')::boolean" if pg else "json_extract(state, '$.gap') = 1"
    with engine.connect() as conn:
        count = conn.execute(sa.text("SELECT count(*) FROM events")).scalar_one()
        forwarded = conn.execute(sa.text("SELECT count(*) FROM deliveries")).scalar_one()
        among = "deliveries d JOIN events e USING (endpoint, event_id)" if forwarded else "events e"
        event_id, object_id = conn.execute(
            sa.text(
                f"SELECT e.event_id, e.object_id FROM {among} WHERE e.endpoint = 'stripe' "
                f"ORDER BY e.event_id LIMIT 1 OFFSET (SELECT count(*) / 2 FROM {among} WHERE e.endpoint = 'stripe')"
            )
        ).one()
        psp, reference = conn.execute(
            sa.text(
                f"SELECT object_id, {reference} FROM objects WHERE endpoint = 'adyen' AND {gap} ORDER BY object_id "
                f"LIMIT 1 OFFSET (SELECT count(*) / 2 FROM objects WHERE endpoint = 'adyen' AND {gap})"
            )
        ).one()
        adyen_id = conn.execute(
            sa.text("SELECT event_id FROM events WHERE object_id = :psp AND endpoint = 'adyen' LIMIT 1"), {"psp": psp}
        ).scalar_one()
    return {
        "count": str(count),
        "event_id": event_id,
        "object_id": object_id,
        "psp": psp,
        "reference": reference,
        "adyen_id": adyen_id,
    }


def routes(engine: sa.Engine, now: datetime) -> list[tuple[str, str, dict[str, Any] | None]]:
    """(name, URL, JSON body of a POST or None): every documented read of the console and API."""
    s = samples(engine)
    half = int(s["count"]) // 2
    since, until, old = (f"{now - timedelta(days=d):%Y-%m-%dT%H:%M:%SZ}" for d in (30, 20, 300))
    api = "/admin/api"
    deep, deep_stripe = cursor_at(engine, half), cursor_at(engine, half // 3, "stripe")
    return [
        ("events", f"{api}/events", None),
        ("events-provider", f"{api}/events?provider=stripe", None),
        ("events-status-failed", f"{api}/events?status=failed", None),
        ("events-status-processed", f"{api}/events?status=processed", None),
        ("events-type", f"{api}/events?type=charge.refunded", None),
        ("events-since-until", f"{api}/events?since={since}&until={until}", None),
        ("events-provider-status-type", f"{api}/events?provider=stripe&status=processed&type=invoice.paid", None),
        ("events-failed-since", f"{api}/events?status=failed&since={since}", None),
        ("events-provider-until-old", f"{api}/events?provider=adyen&until={old}", None),
        ("search-event-id", f"{api}/events?q={s['event_id']}", None),
        ("search-object-id", f"{api}/events?q={s['object_id']}", None),
        ("search-reference", f"{api}/events?q={s['reference']}", None),
        ("search-provider-event-id", f"{api}/events?provider=stripe&q={s['event_id']}", None),
        ("page-deep", f"{api}/events?cursor={deep}", None),
        ("page-deep-provider", f"{api}/events?provider=stripe&cursor={deep_stripe}", None),
        ("counts", f"{api}/counts", None),
        ("counts-provider-since", f"{api}/counts?provider=stripe&since={since}", None),
        ("events-page", "/admin/", None),
        ("dead-letter-page", "/admin/dead", None),
        ("overview", "/admin/overview", None),
        ("event-detail", f"{api}/events/stripe/{s['event_id']}", None),
        ("event-detail-adyen", f"{api}/events/adyen?id={s['adyen_id']}", None),
        ("object", f"{api}/objects/adyen/payment/{s['psp']}", None),
        ("gaps", f"{api}/gaps", None),
        ("rejections", f"{api}/rejections", None),
        ("rejections-endpoint", f"{api}/rejections?endpoint=stripe", None),
        ("destinations", f"{api}/destinations", None),
        ("replays", f"{api}/replays", None),
        (
            "replay-dry-run",
            f"{api}/events/replay",
            {"provider": "stripe", "status": "failed", "since": since, "dry_run": True},
        ),
    ]


def measure(
    apps: dict[str, Flask], runs: int, now: datetime, plan_dir: Path = PLANS
) -> dict[str, list[dict[str, Any]]]:
    """Each route ``runs`` times on each app (``filled`` and ``empty``), the two alternating so that
    load which comes and goes on the machine falls on both alike: p50/p95 in ms, its statements and
    their shared blocks (PostgreSQL); the filled database's plans are written to ``plan_dir``."""
    engines = {label: app.extensions["webhooks"].engine for label, app in apps.items()}
    clients = {label: app.test_client() for label, app in apps.items()}
    listed = {label: routes(engine, now) for label, engine in engines.items()}
    found: dict[str, list[dict[str, Any]]] = {label: [] for label in apps}
    for i, (name, _, _) in enumerate(listed["filled"]):

        def call(label: str, i: int = i) -> int:
            _, url, body = listed[label][i]
            if body is None:
                return clients[label].get(url, headers=AUTH).status_code
            return clients[label].post(url, json=body, headers=AUTH).status_code

        statements = {}
        for label, engine in engines.items():
            with captured(engine) as statements[label]:
                status = call(label)
            assert status == 200, f"{name} on {label}: {listed[label][i][1]} answered {status}"
        times: dict[str, list[float]] = {label: [] for label in apps}
        for _ in range(runs):
            for label in apps:
                started = time.perf_counter()
                call(label)
                times[label].append((time.perf_counter() - started) * 1000)
        for label, engine in engines.items():
            prefix = "pg" if engine.dialect.name == "postgresql" else "sqlite"
            path = plan_dir / f"{prefix}-{name}.txt" if label == "filled" else None
            found[label].append(
                {
                    "query": name,
                    "p50_ms": round(statistics.median(times[label]), 2),
                    "p95_ms": round(percentile(times[label], 0.95), 2),
                    "statements": len(statements[label]),
                    "blocks": plans(engine, statements[label], path),
                }
            )
    return found
