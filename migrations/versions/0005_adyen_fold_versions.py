"""Adyen payments are a fold of their notifications: restart stored versions on the new scale

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 04:20:00

Before this release an Adyen payment's version was ``stage × 10¹⁴ + eventDate`` and its state the
latest notification; now the state is a fold of every notification and its version their count.
A stored pre-fold state is read by the fold as one notification, so it is set to version 1: the
next notification (version 2 or more) folds into it instead of losing to the old, larger number.
Data only; downgrading leaves the versions as they are (the old scale cannot be recomputed).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

OLD_SCALE = 10**14


def upgrade() -> None:
    op.execute(
        sa.text(
            "UPDATE objects SET version = 1 WHERE object_type = 'payment' AND version >= :old"
            " AND provider IN (SELECT DISTINCT provider FROM events WHERE kind = 'adyen')"
        ).bindparams(old=OLD_SCALE)
    )


def downgrade() -> None:
    pass
