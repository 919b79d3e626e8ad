"""config_items, config_secrets, config_changes, config_version: endpoints and destinations managed at runtime

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-03 08:00:00

``config_items``: one row per endpoint or destination created through the admin API (the name is
the primary key, so unique across both kinds); its options as JSON, never its credentials.
``config_secrets``: each secret sealed by ``webhooks.configuration.keys`` (a token bound to its row) with its
fingerprint, validity window and last match; deleted with its item. ``config_changes``: the audit,
secrets as fingerprints. ``config_version``: one row (id 1, version 0 here) that every change bumps
in its transaction. New tables only: the downgrade drops them, and what they held goes with them.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "config_items",
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("label", sa.Text(), nullable=True),
        sa.Column("provider", sa.String(100), nullable=True),
        sa.Column("options", JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("kind IN ('endpoint', 'destination')", name=op.f("ck_config_items_kind")),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_config_items")),
    )
    op.create_table(
        "config_secrets",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("item_kind", sa.String(16), nullable=False),
        sa.Column("item_name", sa.String(100), nullable=False),
        sa.Column("purpose", sa.String(100), nullable=False),
        sa.Column("ciphertext", sa.Text(), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("not_before", sa.DateTime(timezone=True), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_matched_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["item_name"],
            ["config_items.name"],
            name=op.f("fk_config_secrets_item_name_config_items"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_config_secrets")),
    )
    op.create_index("ix_config_secrets_item", "config_secrets", ["item_name"])
    op.create_table(
        "config_changes",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("who", sa.Text(), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("before", JSON, nullable=True),
        sa.Column("after", JSON, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_config_changes")),
    )
    version = op.create_table(
        "config_version",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_config_version_single_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_config_version")),
    )
    op.bulk_insert(version, [{"id": 1, "version": 0}])


def downgrade() -> None:
    op.drop_table("config_version")
    op.drop_table("config_changes")
    op.drop_index("ix_config_secrets_item", table_name="config_secrets")
    op.drop_table("config_secrets")
    op.drop_table("config_items")
