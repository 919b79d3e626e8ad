"""The console's HTML pages: auth everywhere, escaping, CSRF, and a constant cost per page."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask
from flask.testing import FlaskClient

from tests import sample_handlers
from tests.conftest import admin_headers, base_config, drain, make_app, rows, stripe_event, stripe_headers
from tests.support.console import admin_urls, csrf_token
from webhooks.admin import queries

XSS = "<script>alert('pwned')</script>"


def deliver(client: FlaskClient, event_id: str, type_: str = "payment_intent.succeeded", **obj: Any) -> None:
    body = stripe_event(event_id, type_, obj={"id": "pi_1", "object": "payment_intent", **obj})
    assert client.post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200


def test_no_admin_route_answers_without_auth(app: Flask, sqlite_url: str) -> None:
    urls = admin_urls(app)
    assert {("GET", "/admin/"), ("GET", "/admin/static/console.css"), ("POST", "/admin/replay")} <= set(urls)
    client = app.test_client()
    for i, (method, url) in enumerate(urls):
        assert client.open(url, method=method).status_code == 401, url
        # Each wrong password from its own address: one address is throttled after a few (test_admin_throttle).
        guesser = {"REMOTE_ADDR": f"10.9.{i // 256}.{i % 256}"}
        assert client.open(url, method=method, auth=("admin", "nope"), environ_overrides=guesser).status_code == 401, (
            url
        )
    off = make_app(base_config(sqlite_url.replace(".db", "-off.db"), WEBHOOKS_ADMIN_PASSWORD="")).test_client()
    for method, url in urls:
        assert off.open(url, method=method, headers=admin_headers()).status_code == 404, url


def test_script_in_a_payload_is_shown_escaped(app: Flask, client: FlaskClient) -> None:
    deliver(client, "evt_xss", note=XSS)
    body = stripe_event("evt_<b>x</b>", obj={"id": "pi_<img src=x onerror=alert(1)>", "object": "payment_intent"})
    client.post("/webhooks/stripe", data=body, headers=stripe_headers(body))
    drain(app)
    pages = [
        client.get("/admin/", headers=admin_headers()),
        client.get("/admin/events/stripe/evt_xss", headers=admin_headers()),
        client.get("/admin/events/stripe/evt_<b>x</b>", headers=admin_headers()),
    ]
    for page in pages:
        html = page.get_data(as_text=True)
        assert page.status_code == 200 and "<script" not in html and "<img src=x" not in html and "<b>x" not in html
        assert "script-src" not in page.headers["Content-Security-Policy"]  # default-src 'none' forbids scripts
    assert "&lt;script&gt;alert(" in pages[1].get_data(as_text=True)
    raw = client.get("/admin/events/stripe/evt_xss?format=raw", headers=admin_headers())
    assert raw.headers["Content-Type"] == "application/octet-stream" and raw.headers["Content-Disposition"].startswith(
        "attachment"
    )
    assert XSS.encode() in raw.data  # the exact bytes, untouched


@pytest.fixture
def failed(app: Flask, client: FlaskClient) -> FlaskClient:
    sample_handlers.FAIL_TYPES.add("charge.refunded")
    deliver(client, "evt_bad", "charge.refunded")
    drain(app)
    sample_handlers.FAIL_TYPES.clear()
    return client


def test_post_without_csrf_token_is_refused(app: Flask, failed: FlaskClient) -> None:
    url = "/admin/events/stripe/evt_bad/replay"
    token = csrf_token(failed, "/admin/events/stripe/evt_bad")
    for form, headers in [
        ({"reason": "x"}, {}),  # no token
        ({"reason": "x", "csrf_token": "forged"}, {}),
        ({"reason": "x", "csrf_token": token}, {"Origin": "https://evil.example"}),  # right token, other site
    ]:
        response = failed.post(url, data=form, headers=admin_headers() | headers)
        assert response.status_code == 403 and "CSRF" in response.get_data(as_text=True)
    fresh = app.test_client()  # a browser without the nonce cookie cannot reuse a token
    assert fresh.post(url, data={"reason": "x", "csrf_token": token}, headers=admin_headers()).status_code == 403
    assert rows(app, "SELECT status FROM events") == [("failed",)] and rows(app, "SELECT * FROM replays") == []

    assert failed.post(url, data={"reason": "", "csrf_token": token}, headers=admin_headers()).status_code == 400
    done = failed.post(url, data={"reason": "handler fixed", "csrf_token": token}, headers=admin_headers())
    assert done.status_code == 303
    drain(app)
    assert rows(app, "SELECT status FROM events") == [("processed",)]
    assert rows(app, "SELECT who, reason, count FROM replays") == [("admin", "handler fixed", 1)]
    assert "handler fixed" in failed.get("/admin/audit", headers=admin_headers()).get_data(as_text=True)


def test_bulk_replay_page_shows_dry_run_count_then_replays(app: Flask, failed: FlaskClient) -> None:
    page = failed.get("/admin/replay?status=failed&endpoint=stripe", headers=admin_headers()).get_data(as_text=True)
    assert re.search(r'id="dry-run-count">1</b> event matches now', page)
    assert "Replay 1 event</button>" in page
    token = csrf_token(failed, "/admin/replay?status=failed&endpoint=stripe")
    form = {"status": "failed", "provider": "stripe", "csrf_token": token}
    assert failed.post("/admin/replay", data=form, headers=admin_headers()).status_code == 400  # no reason
    done = failed.post("/admin/replay", data=form | {"reason": "bulk"}, headers=admin_headers())
    assert done.status_code == 303 and "/admin/audit" in done.headers["Location"]
    drain(app)
    assert rows(app, "SELECT status FROM events") == [("processed",)]


def test_dead_letter_lists_failed_only(failed: FlaskClient) -> None:
    deliver(failed, "evt_new")
    html = failed.get("/admin/dead", headers=admin_headers()).get_data(as_text=True)
    assert "evt_bad" in html and "evt_new" not in html


# -- a constant cost per page, whatever the table size ------------------------------------------

SEED = {
    "postgresql": """
        INSERT INTO events (endpoint, event_id, kind, event_type, status, attempts, received_at, status_at,
                            payload, headers, scheme, object_id)
        SELECT 'stripe', 'evt_seed_' || g, 'stripe', 'payment_intent.succeeded',
               CASE WHEN g % 100 = 0 THEN 'failed' ELSE 'processed' END, 1,
               now() - g * interval '1 second', now(), '\\x7b7d'::bytea, '{}'::jsonb, 'stripe-v1', 'pi_seed_' || g
        FROM generate_series(CAST(:start AS integer), CAST(:stop AS integer)) AS g""",
    "sqlite": """
        INSERT INTO events (endpoint, event_id, kind, event_type, status, attempts, received_at, status_at,
                            payload, headers, scheme, object_id)
        WITH RECURSIVE seq(g) AS (SELECT :start UNION ALL SELECT g + 1 FROM seq WHERE g < :stop)
        SELECT 'stripe', 'evt_seed_' || g, 'stripe', 'payment_intent.succeeded',
               CASE WHEN g % 100 = 0 THEN 'failed' ELSE 'processed' END, 1,
               strftime('%Y-%m-%d %H:%M:%S', 'now', '-' || g || ' seconds') || '.000000',
               strftime('%Y-%m-%d %H:%M:%S', 'now') || '.000000', X'7B7D', '{}', 'stripe-v1', 'pi_seed_' || g
        FROM seq""",
}
PAGES = [
    "/admin/",
    "/admin/?status=failed",
    "/admin/?endpoint=stripe&status=processed",
    "/admin/?q=pi_seed_500",
    "/admin/dead",
    "/admin/api/events?status=failed",
]


def seed(app: Flask, start: int, stop: int) -> None:
    engine = app.extensions["webhooks"].engine
    with engine.begin() as conn:
        conn.execute(sa.text(SEED[engine.dialect.name]), {"start": start, "stop": stop})
        conn.exec_driver_sql("ANALYZE events" if engine.dialect.name == "postgresql" else "ANALYZE")


@contextmanager
def counting(app: Flask) -> Iterator[list[str]]:
    statements: list[str] = []
    engine = app.extensions["webhooks"].engine

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    sa.event.listen(engine, "before_cursor_execute", count)
    try:
        yield statements
    finally:
        sa.event.remove(engine, "before_cursor_execute", count)


def page_costs(client: FlaskClient, app: Flask) -> dict[str, int]:
    costs = {}
    for url in [*PAGES, "/admin/?cursor=" + next_cursor(client)]:
        with counting(app) as statements:
            response = client.get(url, headers=admin_headers())
        assert response.status_code == 200, (url, response.data[:300])
        costs[url.split("cursor=")[0] + ("cursor" if "cursor=" in url else "")] = len(
            [s for s in statements if not s.startswith(("BEGIN", "COMMIT", "ROLLBACK"))]
        )
    return costs


def next_cursor(client: FlaskClient) -> str:
    return client.get("/admin/api/events?limit=5", headers=admin_headers()).get_json()["next_cursor"] or ""


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite_url", "pg_url"])
def test_list_pages_run_a_constant_number_of_queries(db: str, request: pytest.FixtureRequest) -> None:
    app = make_app(base_config(request.getfixturevalue(db)))
    client = app.test_client()
    seed(app, 1, 10)
    small = page_costs(client, app)
    seed(app, 11, 100_000)
    assert rows(app, "SELECT count(*) FROM events") == [(100_000,)]
    large = page_costs(client, app)
    assert small == large, (small, large)
    print("queries per page at 10 and 100 000 rows:", large)
    assert set(large.values()) <= {1, 2}  # counts + one keyset page (the API: the page only)
    html = client.get("/admin/?status=failed", headers=admin_headers()).get_data(as_text=True)
    assert "1,000" in html and "10,000+" in html  # 1 000 failed exactly; processed is capped


def explain(app: Flask, statement: Any) -> str:
    engine = app.extensions["webhooks"].engine
    sql = str(statement.compile(engine, compile_kwargs={"literal_binds": True}))
    with engine.connect() as conn:
        return "\n".join(row[0] for row in conn.exec_driver_sql("EXPLAIN " + sql))


def test_plans_use_the_feed_indexes_on_postgresql(pg_url: str) -> None:
    app = make_app(base_config(pg_url))
    seed(app, 1, 100_000)
    cursor = queries.decode_cursor(next_cursor(app.test_client()))
    endpoints = ["stripe", "adyen"]
    plans = {
        "default": explain(app, queries.feed(queries.Filters()).limit(51)),
        "status": explain(app, queries.feed(queries.Filters(status="failed")).limit(51)),
        "next page": explain(
            app,
            queries.feed(queries.Filters())
            .where(sa.tuple_(*[queries.Event.received_at, queries.Event.endpoint, queries.Event.event_id]) < cursor)
            .limit(51),
        ),
        "search": explain(app, queries.feed(queries.Filters(q="pi_seed_77"), endpoints).limit(51)),
    }
    for name, plan in plans.items():
        assert "Seq Scan" not in plan and "Index" in plan, (name, plan)
    assert "ix_events_feed" in plans["default"] and "ix_events_status_feed" in plans["status"]
    assert "ix_events_object_id" in plans["search"] and "pk_events" in plans["search"]
    # Counts: each status reads at most COUNT_CAP + 1 rows — by index when the status is rare, by a
    # scan that stops early when it is dense (the planner's choice); never the whole table.
    counts = explain(app, queries.counts_query(queries.Filters()))
    assert counts.count("->  Limit") == 6 and "Index Only Scan" in counts, counts
    print("\n\n".join(f"{name}:\n{plan}" for name, plan in {**plans, "counts": counts}.items()))


def test_quarantine_page_lists_rejections_and_reverifies_with_csrf(sqlite_url: str) -> None:
    broken = make_app(base_config(sqlite_url))
    body = stripe_event("evt_q")
    broken.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body, "whsec_rotated"))
    config = base_config(sqlite_url)
    config["ENDPOINTS"]["stripe"]["secrets"] = ["whsec_rotated"]
    fixed = make_app(config)
    client = fixed.test_client()
    listing = client.get("/admin/rejections", headers=admin_headers()).get_data(as_text=True)
    assert "signature_mismatch" in listing and "stripe" in listing
    token = csrf_token(client, "/admin/rejections/1")
    assert client.post("/admin/rejections/1/reverify", headers=admin_headers()).status_code == 403
    assert rows(fixed, "SELECT 1 FROM events") == []
    done = client.post("/admin/rejections/1/reverify", data={"csrf_token": token}, headers=admin_headers())
    assert done.status_code == 303 and "result=stored" in done.headers["Location"]
    assert rows(fixed, "SELECT event_id FROM events") == [("evt_q",)]
