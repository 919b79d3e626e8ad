"""secret_id: which stored secret matched an event's signature

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-03 10:30:00

``events.secret_id``: the ``config_secrets.id`` of the database secret whose signature matched,
beside ``secret_index`` (its position among the endpoint's live secrets at that moment, which a
rotation shifts). NULL for an endpoint of the file (its secrets have no id: ``secret_index`` says
which), for kinds that verify with the provider's own key, and on every row written before. No
foreign key: a secret deleted with its endpoint leaves its events, and their record of it, alone.
Plain ``ADD COLUMN`` on both databases: SQLite needs no batch rebuild, which would drop the
``events`` tombstone trigger of 0009.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("events", sa.Column("secret_id", sa.String(40), nullable=True))


def downgrade() -> None:
    # A plain DROP COLUMN (SQLite ≥ 3.35): no batch rebuild, so the tombstone trigger stays.
    op.drop_column("events", "secret_id")
