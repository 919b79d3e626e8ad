"""api_tokens: named tokens for the admin API, stored as SHA-256 hashes

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04 02:00:00

One row per token (``webhooks tokens create``): its name (what the audit's ``who`` says), the
SHA-256 of the token (hex, unique: a request's token is found by it), read-only or not, when it
was created, last used and revoked. A revoked row stays so its name is never reused. A new table:
nothing else changes, and the downgrade drops it (the tokens go with it).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("read_only", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
    )


def downgrade() -> None:
    op.drop_table("api_tokens")
