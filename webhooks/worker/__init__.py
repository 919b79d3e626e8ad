"""The work path: the RQ worker and the embedded one, claims, the sweeper, handlers."""
