"""quarantine of rejected requests

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 09:46:34.415558
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rejection_counts",
        sa.Column("endpoint", sa.String(length=100), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("last_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("endpoint", "reason", name=op.f("pk_rejection_counts")),
    )
    op.create_table(
        "rejections",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("endpoint", sa.String(length=100), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=True),
        sa.Column("reason", sa.String(length=64), nullable=False),
        sa.Column("detail", sa.String(length=500), nullable=False),
        sa.Column("http_status", sa.Integer(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column(
            "headers", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"), nullable=False
        ),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("outcome", sa.String(length=100), nullable=True),
        sa.Column("reverified_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rejections")),
    )
    with op.batch_alter_table("rejections", schema=None) as batch_op:
        batch_op.create_index("ix_rejections_received_at", ["received_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("rejections", schema=None) as batch_op:
        batch_op.drop_index("ix_rejections_received_at")

    op.drop_table("rejections")
    op.drop_table("rejection_counts")
