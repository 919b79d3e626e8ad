"""RQ jobs and the handler registry, installed as ``webhooks.jobs``.

``jobs`` imports ``webhooks`` freely; ``webhooks`` imports ``jobs`` only lazily, inside functions,
where the web side needs worker code: the CLI (``serve`` loads the handlers, ``worker`` runs the
loop), the app's embedded worker, ``webhooks.on`` / ``HandlerEvent``, and the Stripe and PayPal
re-fetch. The app enqueues by dotted path (``queue.JOB``) and never imports it.

The repository keeps them in its top-level ``jobs/`` folder; ``webhooks/jobs`` links to it, and
the wheel installs them only under ``webhooks``, so an application's own ``jobs`` package is never
shadowed. In a source checkout the old top-level name still works (``from jobs import on``): it
is the same package, never a second copy with a second handler registry.
"""

from __future__ import annotations

import sys

if __name__ == "jobs":  # imported by its old top-level name from a source checkout
    import importlib

    for _name in ("webhooks.jobs", "webhooks.jobs.handlers", "webhooks.jobs.process"):
        sys.modules[_name.removeprefix("webhooks.")] = importlib.import_module(_name)
else:
    from webhooks.jobs.handlers import HandlerEvent, on

    __all__ = ["HandlerEvent", "on"]
