"""replay keys: one signature yields at most one event; basic-auth fact on rejections

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 03:10:00

``events.replay_key`` holds a fingerprint of the verified signature for schemes that sign
neither the event id nor a timestamp; a unique index per endpoint makes the database refuse a
second event minted from one captured signature. NULLs (every other scheme, and rows stored
before this revision) never collide. ``rejections.basic_auth_ok`` replaces a marker that was
kept among the client-controlled headers.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("replay_key", sa.String(length=64), nullable=True))
        batch_op.create_index("ux_events_replay_key", ["provider", "replay_key"], unique=True)
    with op.batch_alter_table("rejections", schema=None) as batch_op:
        batch_op.add_column(sa.Column("basic_auth_ok", sa.Boolean(), server_default=sa.false(), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("rejections", schema=None) as batch_op:
        batch_op.drop_column("basic_auth_ok")
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.drop_index("ux_events_replay_key")
        batch_op.drop_column("replay_key")
