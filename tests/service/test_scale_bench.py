"""``benchmarks/scale.py`` measures what it says: its fill makes the promised rows at the head schema
(indexes and the tombstone trigger as the migrations left them), and every console read it times
answers 200 on a filled database, with its plan written."""

from __future__ import annotations

import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

from tests.conftest import ROOT
from tests.support.templates import migrated
from webhooks import create_app

sys.path.insert(0, str(ROOT / "benchmarks"))
import scale_fill  # after the path: the benchmarks folder is not a package
import scale_queries

N = 4000


def canonical(definition: str) -> str:
    """An index definition without its casts and parentheses: PostgreSQL deparses a predicate it
    parsed back from its own text (``ARRAY['a'::varchar, …]::text[]``) with the casts moved
    (``ARRAY[('a'::varchar)::text, …]``), the same index either way."""
    return re.sub(r"::(text|character varying)(\[\])?|[()\s]", "", definition)


def indexes_and_triggers(engine: sa.Engine) -> set[str]:
    with engine.connect() as conn:
        found = conn.execute(
            sa.text(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' UNION ALL "
                "SELECT tgname || ':' || tgenabled::text FROM pg_trigger WHERE NOT tgisinternal"
            )
        )
        return {canonical(row[0]) for row in found}


def test_the_fill_makes_the_promised_rows_at_the_head_schema(pg_url: str) -> None:
    migrated(pg_url)
    engine = sa.create_engine(pg_url)
    schema = indexes_and_triggers(engine)
    now = datetime.now(UTC)
    scale_fill.fill_pg(pg_url, N, now)
    try:
        assert indexes_and_triggers(engine) == schema
        with engine.connect() as conn:

            def one(sql: str) -> int:
                return int(conn.execute(sa.text(sql), {"old": now - timedelta(days=359)}).scalar_one())

            assert one("SELECT count(*) FROM events") == N
            assert abs(one("SELECT count(*) FROM events WHERE status = 'failed'") - N // 200) <= 1  # 0.5 %
            assert abs(one("SELECT count(*) FROM events WHERE status = 'ignored'") - N * 3 // 200) <= 1  # 1.5 %
            assert one("SELECT count(*) FROM events WHERE status IN ('received', 'queued', 'processing')") >= 3
            assert one("SELECT count(DISTINCT endpoint) FROM events") == len(scale_fill.KINDS)
            assert one("SELECT count(*) FROM events WHERE received_at < :old") >= N // 10  # purgeable
            assert one("SELECT count(*) FROM attempts") == one(
                "SELECT count(*) FROM events WHERE status IN ('processed', 'ignored', 'failed')"
            )
            assert one("SELECT count(*) FROM bodies") * 2 == one("SELECT count(*) FROM events WHERE endpoint = 'adyen'")
            assert one("SELECT count(*) FROM objects WHERE (state ->> 'gap')::boolean") > 0
            assert one("SELECT count(*) FROM events WHERE reference IS NOT NULL") > 0
            assert one("SELECT count(*) FROM deliveries") > 0
            assert one("SELECT min(length(payload)) FROM events WHERE endpoint = 'shopify'") > 1500  # real sizes
    finally:
        engine.dispose()


def test_every_console_read_answers_on_a_filled_database(pg_url: str, redis_url: str, tmp_path: Path) -> None:
    migrated(pg_url)
    scale_fill.fill_pg(pg_url, N, datetime.now(UTC))
    toml = scale_fill.config_file(tmp_path)
    app = create_app(
        {
            "DATABASE_URL": pg_url,
            "REDIS_URL": redis_url,
            "WEBHOOKS_CONFIG": str(toml),
            "WEBHOOKS_ADMIN_PASSWORD": scale_queries.PASSWORD,
            "WEBHOOKS_EMBEDDED_WORKER": "false",
        }
    )
    try:
        found = scale_queries.measure({"filled": app}, 1, datetime.now(UTC), tmp_path)["filled"]
    finally:
        app.extensions["webhooks"].engine.dispose()
    assert {r["query"] for r in found} >= {"events", "search-reference", "page-deep", "counts", "gaps", "overview"}
    for row in found:
        plan = (tmp_path / f"pg-{row['query']}.txt").read_text()
        assert row["statements"] >= 1 and "actual time=" in plan, row["query"]
        assert row["blocks"] > 0, row["query"]
    search = (tmp_path / "pg-search-reference.txt").read_text()
    assert "ix_events_reference" in search  # the search by provider reference found its index
