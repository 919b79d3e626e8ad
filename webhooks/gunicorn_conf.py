"""``gunicorn -c python:webhooks.gunicorn_conf``: the documented name of the web process's settings,
which live in ``webhooks.service.gunicorn_conf`` (gunicorn reads every public name of this module)."""

from webhooks.service.gunicorn_conf import *  # noqa: F403
