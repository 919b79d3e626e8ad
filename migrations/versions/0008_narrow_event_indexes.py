"""ux_events_replay_key and ix_events_reference cover only the rows that have a value

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 11:40:00

Most events have neither a replay key (only schemes that sign no id or timestamp set one) nor a
provider reference (Adyen's). As full indexes they held an entry per event, written on its insert
and on each of its status changes (the updates that claim and mark an event change indexed
columns, so each writes every index), and PostgreSQL, before it had statistics for a new table,
planned ``endpoint = … AND event_id = …`` through ``ux_events_replay_key``'s ``endpoint``
prefix, scanning every event of the endpoint: each claim and mark then read the whole table.
Partial indexes (``WHERE … IS NOT NULL``) keep what they enforce and serve: uniqueness of a
replay key per endpoint (NULLs never collided), and lookups by a given key or reference.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

INDEXES = (
    ("ux_events_replay_key", ["endpoint", "replay_key"], True, "replay_key IS NOT NULL"),
    ("ix_events_reference", ["reference"], False, "reference IS NOT NULL"),
)


def upgrade() -> None:
    for name, columns, unique, where in INDEXES:
        op.drop_index(name, table_name="events")
        op.create_index(
            name, "events", columns, unique=unique, postgresql_where=sa.text(where), sqlite_where=sa.text(where)
        )


def downgrade() -> None:
    for name, columns, unique, _ in INDEXES:
        op.drop_index(name, table_name="events")
        op.create_index(name, "events", columns, unique=unique)
