"""events, objects and attempts name their endpoint ``endpoint`` (was ``provider``)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 06:20:00

The column always held the endpoint's name, while "provider" elsewhere means the provider kind
(``events.kind``). A rename, data kept: PostgreSQL renames in place (the primary keys and the
indexes on the column follow it, their names unchanged); SQLite's batch mode copies each table
into a new one with the same keys, indexes and CHECK constraint.
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TABLES = ("events", "objects", "attempts")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.alter_column("provider", new_column_name="endpoint")


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.alter_column("endpoint", new_column_name="provider")
