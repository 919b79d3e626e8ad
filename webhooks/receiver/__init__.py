"""The receive path: verify, store, enqueue, answer."""
