"""Runtime configuration, in one home: the environment and the TOML file read into ``Settings``
(``settings``), destinations' validation (``destinations``), the database's items as the file's
tables (``live``), the keyring that seals their secrets (``keys``, ``encryption``). The store's
side (the configuration tables' queries, the snapshot every process holds, plan/apply, key
rotation) is ``webhooks.store.configuration``; its tables are ``webhooks.tables.configuration``;
the watcher that keeps every process's snapshot current is ``webhooks.runtime.watch``."""
