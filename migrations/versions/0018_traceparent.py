"""traceparent: the W3C trace context of an event's receipt and of each delivery's creation

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-03 08:00:00

``events.traceparent``: the receive span's, written when the event is stored; the job continues
its trace from it (``webhooks.tracing``). ``deliveries.traceparent``: the job's, written when the
delivery is created; each forward continues from it. Nullable: NULL when tracing is off, and on
every row written before. An attempt's trace id is its row's (the job and each forward continue
the stored trace), so the history tables need no column. Plain ``ADD COLUMN`` on both databases:
SQLite needs no batch rebuild, which would drop the ``events`` tombstone trigger of 0009.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("events", sa.Column("traceparent", sa.String(55), nullable=True))
    op.add_column("deliveries", sa.Column("traceparent", sa.String(55), nullable=True))


def downgrade() -> None:
    # A plain DROP COLUMN (SQLite ≥ 3.35): no batch rebuild, so the tombstone trigger stays.
    op.drop_column("deliveries", "traceparent")
    op.drop_column("events", "traceparent")
