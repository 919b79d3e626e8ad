"""A claimed event carries a lease (``events.claimed_until``): the sweeper leaves it alone until then

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-03 03:50:00

Nullable: a row never claimed, or claimed before this revision, has none (the sweeper treats it
as expired, as before). A plain ``ADD COLUMN`` on both databases: SQLite needs no batch rebuild,
which would drop the ``events`` tombstone trigger of 0009. No index: the sweeper reads the
column only on the ``processing`` rows ``ix_events_unfinished`` already finds.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("events", sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    # A plain DROP COLUMN (SQLite ≥ 3.35): no batch rebuild, so the tombstone trigger stays.
    op.drop_column("events", "claimed_until")
