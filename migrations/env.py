"""Alembic environment: metadata from ``webhooks.models`` (and the modules that add their tables
to its ``Base``: ``webhooks.tokens``), URL from ``webhooks.config``."""

from __future__ import annotations

from alembic import context

import webhooks.tokens  # noqa: F401 -- imported for its effect: api_tokens joins Base.metadata
from webhooks import config
from webhooks.engines import make_engine
from webhooks.models import Base

url = context.config.attributes.get("url") or config.load().database_url
engine = make_engine(url)

with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
