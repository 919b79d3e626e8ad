"""The RQ jobs, installed as ``webhooks.jobs`` (pyproject.toml maps the repository's top-level
``jobs/`` there: the wheel has no top-level ``jobs``, so an application's own is never shadowed).

``webhooks.jobs.process.process_event`` is the job (queued by that dotted path, ``queue.JOB``).
Imports go one way: these modules import ``webhooks`` (and each other, relatively); ``webhooks``
never imports them. The handler API is ``webhooks.worker.handlers`` (``from webhooks import on``).
"""
