"""events.status holds only the six status words (a CHECK constraint)

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 04:40:00

The words are written out here, not imported from ``webhooks.vocabulary``: a revision records the
schema as it was at that step. Rows with any other status would make the upgrade fail; the
service never wrote one.
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

STATUSES = ("received", "queued", "processing", "processed", "failed", "ignored")


def upgrade() -> None:
    # SQLite cannot add a constraint to a table: batch mode copies the table into a new one.
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.create_check_constraint(
            op.f("ck_events_status"), "status IN (" + ", ".join(f"'{s}'" for s in STATUSES) + ")"
        )


def downgrade() -> None:
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_events_status"), type_="check")
