"""Every table of the service on one metadata (what Alembic compares and the tests walk): the
events' tables (``webhooks.tables.events``), forwarding's (``webhooks.tables.forwarding``), the API tokens
(``webhooks.tables.tokens``), runtime configuration's (``webhooks.tables.configuration``) and the
stream's listeners (``webhooks.tables.listeners``). A module that
declares tables on ``webhooks.tables.events.Base`` is imported here."""

from __future__ import annotations

from sqlalchemy import MetaData

from webhooks.tables import configuration as config_tables
from webhooks.tables import events as models
from webhooks.tables import forwarding as forward_tables
from webhooks.tables import listeners, tokens

TABLE_MODULES = (models, forward_tables, tokens, config_tables, listeners)
METADATA: MetaData = models.Base.metadata
