"""Alembic environment: metadata from ``webhooks.tables``, URL from ``webhooks.configuration.settings``."""

from __future__ import annotations

from alembic import context

from webhooks.configuration import settings as config
from webhooks.engines import make_engine
from webhooks.tables import METADATA

url = context.config.attributes.get("url") or config.load().database_url
engine = make_engine(url)

with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=METADATA,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
