"""forwarding: deliveries, their attempts, destinations' state, objects ordered destinations received

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02 02:00:00

One ``deliveries`` row per (event, destination), written in the transaction that processes the
event; the primary key makes a second one impossible whatever the duplicates and replays. The
forwarder's scans are partial indexes over ``pending`` rows only, so delivered history costs
them nothing.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

PENDING = sa.text("status = 'pending'")


def _id() -> sa.Column[int]:
    return sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False)


def _at(name: str, nullable: bool = True) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "deliveries",
        sa.Column("endpoint", sa.String(100), nullable=False),
        sa.Column("event_id", sa.String(255), nullable=False),
        sa.Column("destination", sa.String(100), nullable=False),
        sa.Column("message_id", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("event_type", sa.String(255), nullable=False),
        sa.Column("object_type", sa.String(100), nullable=True),
        sa.Column("object_id", sa.String(255), nullable=True),
        sa.Column("object_version", sa.BigInteger(), nullable=True),
        sa.Column("forced", sa.Boolean(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("lease", sa.Integer(), nullable=False),
        _at("leased_until"),
        _at("next_attempt_at", False),
        _at("created_at", False),
        _at("status_at", False),
        _at("delivered_at"),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "status IN ('pending', 'delivered', 'failed', 'superseded')", name=op.f("ck_deliveries_status")
        ),
        sa.PrimaryKeyConstraint("endpoint", "event_id", "destination", name="pk_deliveries"),
    )
    op.create_index(
        "ix_deliveries_due",
        "deliveries",
        ["destination", "next_attempt_at"],
        postgresql_where=PENDING,
        sqlite_where=PENDING,
    )
    op.create_index(
        "ix_deliveries_object",
        "deliveries",
        ["destination", "endpoint", "object_type", "object_id", "object_version"],
        postgresql_where=PENDING,
        sqlite_where=PENDING,
    )
    op.create_table(
        "delivery_attempts",
        _id(),
        sa.Column("endpoint", sa.String(100), nullable=False),
        sa.Column("event_id", sa.String(255), nullable=False),
        sa.Column("destination", sa.String(100), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        _at("started_at", False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("response", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_delivery_attempts"),
    )
    op.create_index("ix_delivery_attempts_delivery", "delivery_attempts", ["endpoint", "event_id", "destination"])
    op.create_index("ix_delivery_attempts_started_at", "delivery_attempts", ["started_at"])
    op.create_table(
        "destinations",
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("paused_reason", sa.Text(), nullable=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        _at("opened_at"),
        _at("probe_at"),
        sa.Column("probe_seconds", sa.Float(), nullable=True),
        _at("throttled_until"),
        sa.Column("tokens", sa.Float(), nullable=True),
        _at("tokens_at"),
        _at("last_success_at"),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("name", name="pk_destinations"),
    )
    op.create_table(
        "forwarded_objects",
        sa.Column("destination", sa.String(100), nullable=False),
        sa.Column("endpoint", sa.String(100), nullable=False),
        sa.Column("object_type", sa.String(100), nullable=False),
        sa.Column("object_id", sa.String(255), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("destination", "endpoint", "object_type", "object_id", name="pk_forwarded_objects"),
    )


def downgrade() -> None:
    op.drop_table("forwarded_objects")
    op.drop_table("destinations")
    op.drop_index("ix_delivery_attempts_started_at", table_name="delivery_attempts")
    op.drop_index("ix_delivery_attempts_delivery", table_name="delivery_attempts")
    op.drop_table("delivery_attempts")
    op.drop_index("ix_deliveries_object", table_name="deliveries")
    op.drop_index("ix_deliveries_due", table_name="deliveries")
    op.drop_table("deliveries")
