"""Indexes that match what reads a big table: one endpoint's feed, unfinished rows, gaps, failed
deliveries, tombstone expiry

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02 05:00:00

- ``ix_events_endpoint_feed`` (endpoint, received_at; on PostgreSQL ``INCLUDE (status,
  event_id)``): the events feed filtered by endpoint, and that endpoint's status counts, read one
  range of it; before, a rare endpoint's page walked ``ix_events_feed`` across every other
  endpoint's rows. Partial on ``status IS NOT NULL`` (every row: the column is NOT NULL), which
  only the feed's queries state, and ``event_id`` carried, not a key: as a plain index on
  ``endpoint, …``, PostgreSQL planned a primary-key lookup on a table without statistics through
  it (every row of the endpoint), the trap 0008 removed.
- ``ix_events_unfinished`` (status, status_at) over received, queued and processing rows only
  replaces ``ix_events_status_status_at``, which held an entry for every event ever stored: the
  sweeper and the oldest-pending gauges only ever ask for unfinished rows, and finished rows
  (nearly all of them) are no longer written into it on their last status change.
- ``ix_objects_gaps``: the objects whose state says ``gap``, newest first; the gaps list read every
  object of the endpoint's type to find a few.
- ``ix_deliveries_failed`` (destination) over failed deliveries: the failed count per destination
  was a scan of every delivery ever made.
- ``ix_tombstones_purged`` (purged_at, endpoint, event_id) replaces ``ix_tombstones_purged_at``:
  one purge run stamps all its tombstones with one time, so expiry needs the whole key to walk
  them in batches without re-reading the entries it has just deleted.

On PostgreSQL every index is built ``CONCURRENTLY`` (outside a transaction): a release on a table
of ten million events does not block ingest while it builds. A build that fails leaves an
``INVALID`` index: drop it and run the upgrade again.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

ENDPOINT_FEED = "status IS NOT NULL"
UNFINISHED = "status IN ('received', 'queued', 'processing')"
GAP_WHERE = {"postgresql": "(state ->> 'gap') = 'true'", "sqlite": "json_extract(state, '$.gap') = 1"}


def _postgresql() -> bool:
    return bool(op.get_bind().dialect.name == "postgresql")


def _create(
    name: str, table: str, columns: Sequence[str], where: str | None = None, include: Sequence[str] = ()
) -> None:
    if _postgresql():
        with op.get_context().autocommit_block():
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")  # an INVALID one a failed build left
            op.create_index(
                name,
                table,
                list(columns),
                postgresql_where=sa.text(where) if where else None,
                postgresql_concurrently=True,
                postgresql_include=list(include),
            )
    else:
        op.create_index(name, table, list(columns), sqlite_where=sa.text(where) if where else None)


def _drop(name: str, table: str) -> None:
    if _postgresql():
        with op.get_context().autocommit_block():
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
    else:
        op.drop_index(name, table_name=table)


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    _create(
        "ix_events_endpoint_feed", "events", ["endpoint", "received_at"], ENDPOINT_FEED, include=["status", "event_id"]
    )
    _create("ix_events_unfinished", "events", ["status", "status_at"], UNFINISHED)
    _drop("ix_events_status_status_at", "events")
    _create(
        "ix_objects_gaps", "objects", ["endpoint", "object_type", "updated_at", "object_id"], GAP_WHERE.get(dialect)
    )
    _create("ix_deliveries_failed", "deliveries", ["destination"], "status = 'failed'")
    _create("ix_tombstones_purged", "tombstones", ["purged_at", "endpoint", "event_id"])
    _drop("ix_tombstones_purged_at", "tombstones")


def downgrade() -> None:
    _create("ix_tombstones_purged_at", "tombstones", ["purged_at"])
    _drop("ix_tombstones_purged", "tombstones")
    _drop("ix_deliveries_failed", "deliveries")
    _drop("ix_objects_gaps", "objects")
    _create("ix_events_status_status_at", "events", ["status", "status_at"])
    _drop("ix_events_unfinished", "events")
    _drop("ix_events_endpoint_feed", "events")
