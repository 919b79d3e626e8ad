"""The store's rules, each proved once on both adapters (SQLite and PostgreSQL + Redis): the
``any_app`` fixture runs every test on each. The behaviour tests elsewhere (receiver, worker,
sweeper, console) stay as they are; these pin the rules of ``webhooks.store.transitions``."""

from __future__ import annotations

# ===== the receiver, the sweeper, replay: a duplicate creates no job; a replay is audited with
# its row change; the sweeper recovers each stranded state ====================================


# ===== the worker: a superseded claim changes nothing; the newest version wins in every order;
# an event abandoned after its last attempt is failed ==========================================
