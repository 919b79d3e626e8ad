"""attempts are indexed by finish time, for the console's overview

Revision ID: 0010c
Revises: 0009
Create Date: 2026-12-01 22:00:00

The overview counts processing outcomes per endpoint over the last hour and day by
``attempts.finished_at``: with ``ix_attempts_finished_at`` that is one range of an index, not a
scan of every attempt ever made. (Named 0010c: another revision 0010 may land beside it.)
"""

from __future__ import annotations

from alembic import op

revision = "0010c"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_attempts_finished_at", "attempts", ["finished_at"])


def downgrade() -> None:
    op.drop_index("ix_attempts_finished_at", table_name="attempts")
