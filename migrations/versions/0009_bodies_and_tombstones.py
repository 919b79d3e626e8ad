"""A multi-event delivery's body is kept once (``bodies``); purged events leave tombstones

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 21:00:00

Until 0008 every event of a batch (Adyen notification items, SendGrid's array) stored the whole
delivery body and its headers: 1 200 events of a 162 KB batch took 194 MB. Now each such event
keeps its own item (``payload``, as JSON) and ``body_digest``, the sha256 of the body kept once in
``bodies`` with the delivery's headers. Stored rows are converted in batches (and back on
downgrade).

``tombstones`` keeps the id and replay key of each purged event; a ``BEFORE INSERT`` trigger on
``events`` skips a row whose id or replay key is tombstoned, so a captured delivery can never be
stored again after retention, whatever code inserts it, and ``INSERT … ON CONFLICT DO NOTHING
RETURNING`` simply does not return it (a duplicate). SQLite's batch mode rebuilds a table and
drops its triggers: a later revision that batch-alters ``events`` must call ``create_trigger``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

CHUNK = 500

PG_FUNCTION = """
CREATE FUNCTION events_skip_tombstoned() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT FROM tombstones t WHERE t.endpoint = NEW.endpoint AND t.event_id = NEW.event_id)
     OR (NEW.replay_key IS NOT NULL AND EXISTS (
         SELECT FROM tombstones t WHERE t.endpoint = NEW.endpoint AND t.replay_key = NEW.replay_key)) THEN
    RETURN NULL;
  END IF;
  RETURN NEW;
END
$$"""
PG_TRIGGER = (
    "CREATE TRIGGER tg_events_tombstoned BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION events_skip_tombstoned()"
)
SQLITE_TRIGGER = """
CREATE TRIGGER tg_events_tombstoned BEFORE INSERT ON events
WHEN EXISTS (SELECT 1 FROM tombstones t WHERE t.endpoint = NEW.endpoint AND t.event_id = NEW.event_id)
  OR (NEW.replay_key IS NOT NULL AND EXISTS (
      SELECT 1 FROM tombstones t WHERE t.endpoint = NEW.endpoint AND t.replay_key = NEW.replay_key))
BEGIN SELECT RAISE(IGNORE); END"""


def create_trigger() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(PG_FUNCTION)
        op.execute(PG_TRIGGER)
    else:
        op.execute(SQLITE_TRIGGER)


def drop_trigger() -> None:
    op.execute(
        "DROP TRIGGER IF EXISTS tg_events_tombstoned"
        + (" ON events" if op.get_bind().dialect.name == "postgresql" else "")
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS events_skip_tombstoned()")


def _json(conn: sa.Connection) -> Any:
    return sa.JSON().with_variant(sa.dialects.postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    json_type = _json(op.get_bind())
    op.create_table(
        "bodies",
        sa.Column("endpoint", sa.String(length=100), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("headers", json_type, nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("endpoint", "digest", name=op.f("pk_bodies")),
    )
    op.create_table(
        "tombstones",
        sa.Column("endpoint", sa.String(length=100), nullable=False),
        sa.Column("event_id", sa.String(length=255), nullable=False),
        sa.Column("replay_key", sa.String(length=64), nullable=True),
        sa.Column("purged_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("endpoint", "event_id", name=op.f("pk_tombstones")),
    )
    where = "replay_key IS NOT NULL"
    op.create_index(
        "ix_tombstones_replay_key",
        "tombstones",
        ["endpoint", "replay_key"],
        postgresql_where=sa.text(where),
        sqlite_where=sa.text(where),
    )
    op.create_index("ix_tombstones_purged_at", "tombstones", ["purged_at"])
    op.add_column("events", sa.Column("body_digest", sa.String(length=64), nullable=True))
    where = "body_digest IS NOT NULL"
    op.create_index(
        "ix_events_body_digest",
        "events",
        ["endpoint", "body_digest"],
        postgresql_where=sa.text(where),
        sqlite_where=sa.text(where),
    )
    create_trigger()
    _split_bodies(op.get_bind())


def downgrade() -> None:
    _join_bodies(op.get_bind())
    drop_trigger()
    op.drop_index("ix_events_body_digest", table_name="events")
    with op.batch_alter_table("events") as batch_op:
        batch_op.drop_column("body_digest")
    op.drop_index("ix_tombstones_purged_at", table_name="tombstones")
    op.drop_index("ix_tombstones_replay_key", table_name="tombstones")
    op.drop_table("tombstones")
    op.drop_table("bodies")


def _tables(conn: sa.Connection) -> tuple[sa.Table, sa.Table]:
    meta = sa.MetaData()
    json_type = _json(conn)
    events = sa.Table(
        "events",
        meta,
        sa.Column("endpoint", sa.String),
        sa.Column("event_id", sa.String),
        sa.Column("kind", sa.String),
        sa.Column("payload", sa.LargeBinary),
        sa.Column("item_index", sa.Integer),
        sa.Column("headers", json_type),
        sa.Column("received_at", sa.DateTime(timezone=True)),
        sa.Column("body_digest", sa.String),
    )
    bodies = sa.Table(
        "bodies",
        meta,
        sa.Column("endpoint", sa.String),
        sa.Column("digest", sa.String),
        sa.Column("body", sa.LargeBinary),
        sa.Column("headers", json_type),
        sa.Column("received_at", sa.DateTime(timezone=True)),
    )
    return events, bodies


def _split_bodies(conn: sa.Connection) -> None:
    """Each stored batch event: its body and headers into ``bodies`` once, its item into ``payload``."""
    from webhooks.providers import PROVIDERS
    from webhooks.providers.base import encode_item

    events, bodies = _tables(conn)
    todo = (events.c.item_index.is_not(None)) & (events.c.body_digest.is_(None))
    while True:
        batch = conn.execute(
            sa.select(
                events.c.endpoint,
                events.c.event_id,
                events.c.kind,
                events.c.payload,
                events.c.item_index,
                events.c.headers,
                events.c.received_at,
            )
            .where(todo)
            .limit(CHUNK)
        ).all()
        if not batch:
            return
        parsed: dict[str, Any] = {}
        for endpoint, event_id, kind, payload, index, headers, received_at in batch:
            digest = hashlib.sha256(payload).hexdigest()
            if digest not in parsed:
                parsed[digest] = json.loads(payload)
                known = conn.execute(
                    sa.select(bodies.c.digest).where(bodies.c.endpoint == endpoint, bodies.c.digest == digest)
                ).first()
                if known is None:
                    conn.execute(
                        sa.insert(bodies).values(
                            endpoint=endpoint, digest=digest, body=payload, headers=headers, received_at=received_at
                        )
                    )
            provider = PROVIDERS.get(kind)
            data = parsed[digest]
            item = provider.item(data, index) if provider is not None else data[index]
            conn.execute(
                sa.update(events)
                .where(events.c.endpoint == endpoint, events.c.event_id == event_id)
                .values(payload=encode_item(item), headers={}, body_digest=digest)
            )


def _join_bodies(conn: sa.Connection) -> None:
    """Back to 0008: every batch event holds its delivery's whole body and headers again."""
    events, bodies = _tables(conn)
    while True:
        batch = conn.execute(
            sa.select(events.c.endpoint, events.c.event_id, bodies.c.body, bodies.c.headers)
            .join(bodies, (bodies.c.endpoint == events.c.endpoint) & (bodies.c.digest == events.c.body_digest))
            .limit(CHUNK)
        ).all()
        if not batch:
            return
        for endpoint, event_id, body, headers in batch:
            conn.execute(
                sa.update(events)
                .where(events.c.endpoint == endpoint, events.c.event_id == event_id)
                .values(payload=body, headers=headers, body_digest=None)
            )
