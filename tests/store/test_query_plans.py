"""Each read that must not grow with the tables uses the index made for it (revision 0013), on a
populated, analysed table: the statements the product code itself runs are captured and
explained (PostgreSQL: ``EXPLAIN (FORMAT JSON)``, the index names in the plan tree; SQLite:
``EXPLAIN QUERY PLAN``)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from tests.conftest import base_config, make_app, runtime
from webhooks.admin import gaps, queries
from webhooks.forward import backlog
from webhooks.service import collector
from webhooks.store.purge import Plan, expire_tombstones, purge

NOW = datetime(2026, 6, 1, tzinfo=UTC)
EVENTS = 30_000
# stripe: most rows; adyen: an eighth; tiny: one row in a thousand. Statuses: mostly processed
# and ignored, 0.5 % failed, 0.1 % queued, a few received and processing.
PG_FILL = f"""
INSERT INTO events (endpoint, event_id, kind, event_type, status, attempts, received_at, status_at,
  object_type, object_id, object_version, payload, headers, scheme, reference)
SELECT CASE WHEN i % 1000 = 7 THEN 'tiny' WHEN i % 8 = 1 THEN 'adyen' ELSE 'stripe' END, 'evt_' || i, 'stripe',
  CASE WHEN i % 4 = 0 THEN 'invoice.paid' ELSE 'charge.succeeded' END,
  CASE WHEN i % 200 = 0 THEN 'failed' WHEN i % 1000 = 1 THEN 'queued' WHEN i % 5000 = 3 THEN 'received'
       WHEN i % 5000 = 4 THEN 'processing' WHEN i % 3 = 0 THEN 'ignored' ELSE 'processed' END,
  1, :now - make_interval(secs => ({EVENTS} - i) * 600), :now - make_interval(secs => ({EVENTS} - i) * 600),
  'charge', 'ch_' || (i / 3), i, convert_to(repeat('x', 200), 'UTF8'), '{{}}', 's',
  CASE WHEN i % 50 = 0 THEN 'ref_' || i END
FROM generate_series(1, {EVENTS}) i"""
SQLITE_FILL = f"""
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {EVENTS})
INSERT INTO events (endpoint, event_id, kind, event_type, status, attempts, received_at, status_at,
  object_type, object_id, object_version, payload, headers, scheme, reference)
SELECT CASE WHEN i % 1000 = 7 THEN 'tiny' WHEN i % 8 = 1 THEN 'adyen' ELSE 'stripe' END, 'evt_' || i, 'stripe',
  CASE WHEN i % 4 = 0 THEN 'invoice.paid' ELSE 'charge.succeeded' END,
  CASE WHEN i % 200 = 0 THEN 'failed' WHEN i % 1000 = 1 THEN 'queued' WHEN i % 5000 = 3 THEN 'received'
       WHEN i % 5000 = 4 THEN 'processing' WHEN i % 3 = 0 THEN 'ignored' ELSE 'processed' END,
  1, datetime(:epoch - ({EVENTS} - i) * 600, 'unixepoch'), datetime(:epoch - ({EVENTS} - i) * 600, 'unixepoch'),
  'charge', 'ch_' || (i / 3), i, randomblob(200), '{{}}', 's',
  CASE WHEN i % 50 = 0 THEN 'ref_' || i END
FROM n"""
OBJECTS = """
INSERT INTO objects (endpoint, object_type, object_id, version, state, last_event_id, updated_at)
SELECT 'adyen', 'payment', 'psp_' || i, 1, {state}, 'evt', {at} FROM {series}"""
DELIVERIES = """
INSERT INTO deliveries (endpoint, event_id, destination, message_id, status, event_type, forced, attempts, lease,
  next_attempt_at, created_at, status_at)
SELECT 'stripe', 'evt_' || i, 'crm', 'm' || i,
  CASE WHEN i % 500 = 0 THEN 'failed' WHEN i % 1000 = 1 THEN 'pending' ELSE 'delivered' END,
  't', {false}, 1, 0, {at}, {at}, {at} FROM {series}"""
TOMBSTONES = "INSERT INTO tombstones (endpoint, event_id, purged_at) SELECT 'stripe', 'gone_' || i, {at} FROM {series}"


def fill(engine: sa.Engine) -> None:
    pg = engine.dialect.name == "postgresql"
    with engine.begin() as conn:
        if pg:
            series, at = "generate_series(1, 20000) i", ":now - make_interval(secs => i)"
            conn.execute(sa.text(PG_FILL), {"now": NOW})
            state = "jsonb_build_object('status', 'authorised', 'gap', i % 2000 = 0)"
            false = "false"
        else:
            series = "(WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000) SELECT i FROM n)"
            at = "datetime(:epoch - i, 'unixepoch')"
            conn.execute(sa.text(SQLITE_FILL), {"epoch": int(NOW.timestamp())})
            state = (
                "json_object('status', 'authorised', 'gap', json(CASE WHEN i % 2000 = 0 THEN 'true' ELSE 'false' END))"
            )
            false = "0"
        params = {"now": NOW} if pg else {"epoch": int(NOW.timestamp())}
        conn.execute(sa.text(OBJECTS.format(state=state, at=at, series=series)), params)
        conn.execute(sa.text(DELIVERIES.format(false=false, at=at, series=series)), params)
        conn.execute(sa.text(TOMBSTONES.format(at=":old", series=series)), {"old": NOW - timedelta(days=800)})
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE" if pg else "ANALYZE")


@contextmanager
def captured(engine: sa.Engine) -> Iterator[list[tuple[str, Any]]]:
    """Every SELECT or DELETE the block runs, with its parameters."""
    found: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "DELETE", "WITH")) and not executemany:
            found.append((statement, parameters))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield found
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


def _walk(node: dict[str, Any], out: set[str]) -> None:
    if "Index Name" in node:
        out.add(node["Index Name"])
    if node.get("Node Type") == "Seq Scan":
        out.add("Seq Scan on " + node["Relation Name"])
    for child in node.get("Plans", []):
        _walk(child, out)


def plan(engine: sa.Engine, statement: str, parameters: Any) -> set[str]:
    """The indexes (and sequential scans: ``Seq Scan on t`` / ``SCAN t``) of one statement's plan."""
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            found: set[str] = set()
            raw = conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + statement, parameters).scalar()
            _walk((raw if isinstance(raw, list) else json.loads(raw))[0]["Plan"], found)
            return found
        details = [row[-1] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters)]
    words = set()
    for detail in details:
        if " INDEX " in detail:
            words.add(detail.split(" INDEX ")[1].split()[0])
        elif detail.startswith("SCAN "):
            name = detail.split()[1]  # not "SCAN 5 CONSTANT ROWS" (a VALUES list), a subquery or a CTE
            if not (name.isdigit() or name.startswith(("anon_", "CONSTANT", "SUBQUERY")) or name == "e"):
                words.add("Seq Scan on " + name)
    return words


def plans_of(engine: sa.Engine, run: Callable[[], object]) -> list[set[str]]:
    with captured(engine) as found:
        run()
    assert found, "nothing ran"
    return [plan(engine, statement, parameters) for statement, parameters in found]


def _populated(url: str) -> Any:
    rt = runtime(make_app(base_config(url)))
    fill(rt.engine)
    return rt


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def populated(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One populated database per dialect for the read-only checks (filled once: seconds)."""
    if request.param == "sqlite":
        yield _populated(f"sqlite:///{tmp_path_factory.mktemp('plans') / 'webhooks.db'}")
        return
    admin = sa.create_engine(request.getfixturevalue("pg_admin_url"), isolation_level="AUTOCOMMIT")
    name = f"wh_test_plans_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    rt = _populated(admin.url.set(database=name).render_as_string(hide_password=False))
    yield rt
    rt.engine.dispose()
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(params=["sqlite_url", "pg_url"])
def purged(request: pytest.FixtureRequest) -> Any:
    """A database of its own, for the test that deletes."""
    return _populated(request.getfixturevalue(request.param))


def uses(found: list[set[str]], index: str, *, table: str = "events") -> None:
    everything = set().union(*found)
    assert index in everything, found
    assert f"Seq Scan on {table}" not in everything, found


def test_one_endpoints_feed_and_its_deep_pages_read_its_own_index(populated: Any) -> None:
    rt = populated
    filters = queries.Filters(endpoint="tiny")
    with rt.sessions() as session:
        _, cursor = queries.page(session, filters, limit=5)
    assert cursor is not None

    def run() -> None:
        with rt.sessions() as session:
            queries.page(session, filters, limit=5, cursor=cursor)
            queries.page(session, queries.Filters(endpoint="tiny", since=NOW - timedelta(days=100)), limit=5)

    uses(plans_of(rt.engine, run), "ix_events_endpoint_feed")


def test_status_counts_for_one_endpoint_read_its_index(populated: Any) -> None:
    rt = populated

    def run() -> None:
        with rt.sessions() as session:
            queries.status_counts(session, queries.Filters(endpoint="tiny"))

    # SQLite has no INCLUDE: it reads the status from ix_events_status_feed, filtering the endpoint
    # in the index (bounded by the cap for dense statuses, by the status's rows for rare ones).
    wanted = "ix_events_endpoint_feed" if rt.engine.dialect.name == "postgresql" else "ix_events_status_feed"
    uses(plans_of(rt.engine, run), wanted)


def test_gaps_read_only_the_gap_objects(populated: Any) -> None:
    rt = populated

    def run() -> None:
        with rt.sessions() as session:
            dialect = session.get_bind().dialect.name
            found = session.scalars(gaps.gaps_query({"adyen": "payment"}, None, dialect)).all()
            assert len(found) == 10  # every 2 000th of 20 000

    uses(plans_of(rt.engine, run), "ix_objects_gaps", table="objects")


def test_failed_deliveries_and_failed_events_are_counted_from_small_indexes(populated: Any) -> None:
    rt = populated

    def run() -> None:
        with rt.engine.connect() as conn:
            [found] = backlog.backlogs(conn, ["crm"], NOW)
            assert found.failed == 40
            assert conn.execute(sa.select(collector.failed_query())).scalar_one() == EVENTS // 200
            assert conn.execute(collector.oldest_query()).scalar() is not None

    found = plans_of(rt.engine, run)
    uses(found, "ix_deliveries_failed", table="deliveries")
    uses(found, "ix_events_status_feed")


def test_the_sweeper_reads_only_unfinished_rows(populated: Any) -> None:
    rt = populated

    def run() -> None:
        assert sum(len(page) for page in rt.store.stranded(NOW, 10_000)) == 36  # 30 queued, 6 received
        rt.store.abandoned(NOW - timedelta(days=10_000), 100, 5, NOW)
        with Session(rt.engine) as session:
            from webhooks.admin import overview

            assert overview.build(session, [], NOW).oldest_pending is not None

    uses(plans_of(rt.engine, run), "ix_events_unfinished")


def test_purge_walks_the_status_index_and_tombstone_expiry_its_own(purged: Any) -> None:
    rt = purged
    plan = Plan(timedelta(days=195), timedelta(days=200), batch_size=1000, yield_ratio=0)  # a batch or two
    found = plans_of(rt.engine, lambda: purge(rt.sessions, plan, kinds={"stripe"}, now=NOW, force=True))
    uses(found, "ix_events_status_feed")  # the batches; their deletes seek the primary key
    # The purge just wrote its tombstones: statistics of the table as it now is, not as autovacuum
    # may or may not have caught it mid-test (a CI run's planner once read the whole table then).
    with rt.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("ANALYZE tombstones")
    expired = plans_of(rt.engine, lambda: expire_tombstones(rt.sessions, NOW - timedelta(days=365), 10_000))
    uses(expired, "ix_tombstones_purged", table="tombstones")


def test_the_overview_reads_only_the_last_days_range_of_the_time_index(populated: Any) -> None:
    rt = populated
    from webhooks.admin import overview

    def run() -> None:
        with Session(rt.engine) as session:
            built = overview.build(session, ["stripe", "adyen", "tiny"], NOW)
            assert built.plots["stripe"]["day"].total("received") > 0

    found = plans_of(rt.engine, run)
    uses(found, "ix_events_feed")
    # Grouped by endpoint first, SQLite walked the whole primary key for the day's few rows.
    assert "sqlite_autoindex_events_1" not in set().union(*found), found


@pytest.mark.parametrize("populated", ["sqlite"], indirect=True)  # the handover is SQLite's (webhooks serve)
def test_the_handover_reads_the_queued_rows_from_the_unfinished_index(populated: Any) -> None:
    """``webhooks serve``'s worker process polls ``queued`` rows every 50 ms (``webhooks.worker.handover``):
    a range of ``ix_events_unfinished`` in its own order, no other index and no sort."""
    rt = populated
    found = plans_of(rt.engine, lambda: rt.store.queued_since(NOW - timedelta(days=30), 2000))
    uses(found, "ix_events_unfinished")
    assert set().union(*found) == {"ix_events_unfinished"}, found
