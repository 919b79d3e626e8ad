"""gunicorn settings for the ``web`` process (``gunicorn -c python:webhooks.gunicorn_conf``).

Environment: ``PORT``, ``WEB_CONCURRENCY`` (processes), ``WEB_THREADS`` (threads per process).
"""

from __future__ import annotations

import os

bind = f"0.0.0.0:{os.environ.get('PORT', '8000')}"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_class = "gthread"
threads = int(os.environ.get("WEB_THREADS", "4"))
# Providers give up after ~10 s; a request that takes longer is stuck, not slow.
timeout = 30
graceful_timeout = 30  # SIGTERM: in-flight requests finish first
keepalive = 5
# Request limits: webhook requests have small headers; refuse oversized ones before the app.
limit_request_line = 8190
limit_request_fields = 100
limit_request_field_size = 16384
# One control socket path is shared by every gunicorn of a user; this service needs none.
control_socket_disable = True
accesslog = "-"
