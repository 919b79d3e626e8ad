"""Every table of the service on one metadata (what Alembic compares and the tests walk): the
events' tables (``webhooks.models``) and forwarding's (``webhooks.forward_tables``). A module that
declares tables on ``webhooks.models.Base`` is imported here."""

from __future__ import annotations

from sqlalchemy import MetaData

from webhooks import forward_tables, models

TABLE_MODULES = (models, forward_tables)
METADATA: MetaData = models.Base.metadata
