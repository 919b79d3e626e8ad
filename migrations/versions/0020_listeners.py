"""listeners: the audit of the event stream's listeners (``webhooks listen``)

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05 22:00:00

``listeners``: one row per stream a client opened on ``GET /admin/api/stream`` (docs/listen.md):
who (the token's name, or ``admin``), from where, what it asked for (endpoint and type globs, where
it resumed from), when it started and ended, how many events it was sent and why it ended. A row
whose ``ended_at`` is NULL is a stream still open, or one whose process died. A new table only: the
downgrade drops it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "listeners",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("who", sa.Text(), nullable=False),
        sa.Column("address", sa.String(64), nullable=False),
        sa.Column("endpoints", sa.Text(), nullable=False),
        sa.Column("types", sa.Text(), nullable=False),
        sa.Column("resumed_from", sa.String(64), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("sent", sa.BigInteger(), nullable=False),
        sa.Column("ended_because", sa.String(32), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_listeners")),
    )
    op.create_index("ix_listeners_started_at", "listeners", ["started_at"])


def downgrade() -> None:
    op.drop_index("ix_listeners_started_at", table_name="listeners")
    op.drop_table("listeners")
