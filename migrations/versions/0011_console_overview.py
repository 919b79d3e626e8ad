"""attempts are indexed by finish time, for the console's overview; duplicates are counted per event

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 22:00:00

The overview counts processing outcomes per endpoint over the last hour and day by
``attempts.finished_at``: with ``ix_attempts_finished_at`` that is one range of an index, not a
scan of every attempt ever made.

``duplicates`` counts, per event delivered again after it was stored, those deliveries (the
console shows "delivered n times"). A table of its own, not a column of ``events``: counting in
``events`` would lock the row a worker holds ``FOR UPDATE`` while its handlers run, so a
duplicate arriving then would stall its whole group-commit batch.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_attempts_finished_at", "attempts", ["finished_at"])
    op.create_table(
        "duplicates",
        sa.Column("endpoint", sa.String(100), nullable=False),
        sa.Column("event_id", sa.String(255), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("last_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("endpoint", "event_id", name="pk_duplicates"),
    )


def downgrade() -> None:
    op.drop_table("duplicates")
    op.drop_index("ix_attempts_finished_at", table_name="attempts")
