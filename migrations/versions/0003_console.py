"""operator console: search reference, feed indexes, attempts, replay audit

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 09:48:54.877011

The feed indexes replace ``ix_events_received_at`` (it is their leading column). Building them
blocks writes to ``events`` for as long as the build takes on a large PostgreSQL table: run it
at a quiet time.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "attempts",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("provider", sa.String(length=100), nullable=False),
        sa.Column("event_id", sa.String(length=255), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("traceback", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_attempts")),
    )
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.create_index("ix_attempts_event", ["provider", "event_id", "number"], unique=False)

    op.create_table(
        "replays",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("who", sa.String(length=100), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column(
            "filter", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"), nullable=False
        ),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column(
            "event_ids", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"), nullable=False
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_replays")),
    )
    with op.batch_alter_table("replays", schema=None) as batch_op:
        batch_op.create_index("ix_replays_at", ["at"], unique=False)

    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("reference", sa.String(length=255), nullable=True))
        batch_op.drop_index(batch_op.f("ix_events_received_at"))
        batch_op.create_index("ix_events_feed", ["received_at", "provider", "event_id"], unique=False)
        batch_op.create_index("ix_events_object_id", ["object_id"], unique=False)
        batch_op.create_index("ix_events_reference", ["reference"], unique=False)
        batch_op.create_index("ix_events_status_feed", ["status", "received_at", "provider", "event_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.drop_index("ix_events_status_feed")
        batch_op.drop_index("ix_events_reference")
        batch_op.drop_index("ix_events_object_id")
        batch_op.drop_index("ix_events_feed")
        batch_op.create_index(batch_op.f("ix_events_received_at"), ["received_at"], unique=False)
        batch_op.drop_column("reference")

    with op.batch_alter_table("replays", schema=None) as batch_op:
        batch_op.drop_index("ix_replays_at")

    op.drop_table("replays")
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_index("ix_attempts_event")

    op.drop_table("attempts")
