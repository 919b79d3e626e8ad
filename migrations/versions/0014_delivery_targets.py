"""deliveries.target: the identity of the destination a delivery was created for

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03 04:00:00

A delivery is sent only to the destination it was made for: ``target`` holds that destination's
identity (a SHA-256 of its URL, never the URL: a query may carry a token). A destination removed
from the configuration, or configured again under its name at another URL, leaves its pending
deliveries held until an operator adopts or fails them (``/admin/api/destinations?removed=1``).
Rows made before this revision have none (NULL): they go to whatever is configured under their
name, as before. A plain ``add_column`` (no batch mode, so the ``events`` trigger is untouched).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("deliveries", sa.Column("target", sa.String(64), nullable=True))


def downgrade() -> None:
    op.drop_column("deliveries", "target")  # SQLite ≥ 3.35 drops a column in place
