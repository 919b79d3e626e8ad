"""The processes: the CLI, ``webhooks serve``, gunicorn's settings, health and metrics exposition."""
