"""The store's side of runtime configuration (``webhooks.configuration``): the items and their
sealed secrets (``items``), the snapshot every process holds (``snapshot``), ``webhooks config
plan/apply`` (``plan``), ``webhooks keys rotate`` (``key_rotation``) and when each secret last
matched (``last_matched``)."""
