"""Every table of the service on one metadata (what Alembic compares and the tests walk): the
events' tables (``webhooks.models``), forwarding's (``webhooks.forward_tables``) and the admin API's
tokens (``webhooks.tokens``). A module that
declares tables on ``webhooks.models.Base`` is imported here."""

from __future__ import annotations

from sqlalchemy import MetaData

from webhooks import forward_tables, models, tokens

TABLE_MODULES = (models, forward_tables, tokens)
METADATA: MetaData = models.Base.metadata
