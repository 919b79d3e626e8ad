"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-30 09:39:22.670045
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("provider", sa.String(length=100), nullable=False),
        sa.Column("event_id", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("event_type", sa.String(length=255), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("processed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("object_type", sa.String(length=100), nullable=True),
        sa.Column("object_id", sa.String(length=255), nullable=True),
        sa.Column("object_version", sa.BigInteger(), nullable=True),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("item_index", sa.Integer(), nullable=True),
        sa.Column(
            "headers", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"), nullable=False
        ),
        sa.Column("scheme", sa.String(length=32), nullable=False),
        sa.Column("secret_index", sa.Integer(), nullable=True),
        sa.Column("signed_at", sa.BigInteger(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("last_traceback", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("provider", "event_id", name=op.f("pk_events")),
    )
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.create_index("ix_events_received_at", ["received_at"], unique=False)
        batch_op.create_index("ix_events_status_status_at", ["status", "status_at"], unique=False)

    op.create_table(
        "objects",
        sa.Column("provider", sa.String(length=100), nullable=False),
        sa.Column("object_type", sa.String(length=100), nullable=False),
        sa.Column("object_id", sa.String(length=255), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column(
            "state", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"), nullable=False
        ),
        sa.Column("last_event_id", sa.String(length=255), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("provider", "object_type", "object_id", name=op.f("pk_objects")),
    )


def downgrade() -> None:
    op.drop_table("objects")
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.drop_index("ix_events_status_status_at")
        batch_op.drop_index("ix_events_received_at")

    op.drop_table("events")
