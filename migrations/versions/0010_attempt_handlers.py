"""Each attempt names the handlers that ran (``attempts.handlers``, a JSON list; ``[]``: none matched)

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 21:20:00

Nullable: attempts recorded before this revision, and failed attempts, name none (``NULL``: not
recorded). A plain ``ADD COLUMN`` on both databases: SQLite needs no batch rebuild (which would
drop the ``events`` trigger of 0009; ``attempts`` has none anyway).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("attempts", sa.Column("handlers", sa.JSON().with_variant(JSONB(), "postgresql"), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("handlers")
