"""The worker class operators name: ``rq worker -w webhooks.jobs.worker.Worker``.

It lives in ``webhooks.worker.loop`` (with the loop ``webhooks worker`` runs and the ticker); this
module keeps the documented dotted path. ``jobs`` imports ``webhooks``, never the reverse.
"""

from __future__ import annotations

from webhooks.worker.loop import Worker

__all__ = ["Worker"]
