"""The table the fault suite's handlers write: one row per event, ``n`` counts committed effects.

Kept apart from ``handlers`` so the test process can create it without registering the handlers
(only the service processes, via ``WEBHOOKS_HANDLERS``, import those)."""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()
effects = sa.Table(
    "fault_effects",
    metadata,
    sa.Column("endpoint", sa.String(100), primary_key=True),
    sa.Column("event_id", sa.String(255), primary_key=True),
    sa.Column("n", sa.Integer, nullable=False),
)
