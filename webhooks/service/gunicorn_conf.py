"""gunicorn settings for the ``web`` process (``gunicorn -c python:webhooks.service.gunicorn_conf``).

Environment: ``PORT``, ``WEB_CONCURRENCY`` (processes), ``WEB_THREADS`` (threads per process),
``WEB_HEAD_TIMEOUT_SECONDS`` and ``WEB_BODY_TIMEOUT_SECONDS`` (a request's deadlines, see below).
Before it binds, the master sets up logging and the metrics directory, stops with one line if its
address is taken or the configuration is wrong, says when the console is off (no
``WEBHOOKS_ADMIN_PASSWORD``), and waits for the database schema to reach the head revision (the
release step may still be running beside it).
"""

from __future__ import annotations

import logging
from typing import Any

from webhooks.configuration import settings as config

# gunicorn reads every public name of the module it is given (``webhooks.gunicorn_conf`` re-exports
# these): only its settings and hooks, never a name it would take for one (``config`` is a setting).
__all__ = [
    "accesslog",
    "bind",
    "body_timeout",
    "child_exit",
    "control_socket_disable",
    "graceful_timeout",
    "head_timeout",
    "keepalive",
    "limit_request_field_size",
    "limit_request_fields",
    "limit_request_line",
    "logger_class",
    "on_starting",
    "threads",
    "timeout",
    "worker_class",
    "workers",
]

_web = config.web_process()
bind = f"0.0.0.0:{_web.port}"
workers = _web.workers
# gthread whose reads stop at a deadline per request: a client dripping its head or body frees
# its thread when the deadline passes (answered 408) instead of holding it for as long as it drips.
worker_class = "webhooks.service.gunicorn_worker.DeadlineWorker"
# Threads are what slow senders take up until their deadline: many, since an idle one costs little
# memory and is only started when needed; the database pool is sized apart (webhooks.db), bounded.
threads = _web.threads
head_timeout = _web.head_timeout  # from a thread taking it up
body_timeout = _web.body_timeout  # from the end of its head
# Providers give up after ~10 s; a request that takes longer is stuck, not slow.
timeout = 30
# SIGTERM: in-flight requests finish first, within WEBHOOKS_STOP_TIMEOUT (25 s: under Heroku's 30 s kill).
graceful_timeout = max(1, round(_web.stop_timeout))  # gunicorn takes whole seconds
keepalive = 5
# Request limits: webhook requests have small headers; refuse oversized ones before the app.
limit_request_line = 8190
limit_request_fields = 100
limit_request_field_size = 16384
# One control socket path is shared by every gunicorn of a user; this service needs none.
control_socket_disable = True
# No access log: formatting it was ~7 % of a web process's CPU under load, and the receiver's own
# one-line delivery log (webhooks.receiver.receive) already records every delivery and its answer.
accesslog = None
# gunicorn's own lines in the service's log format (webhooks.service.process_setup), not a second format.
logger_class = "webhooks.service.gunicorn_worker.RootLogger"


def on_starting(server: Any) -> None:
    from webhooks.configuration import settings as config
    from webhooks.errors import ConfigError
    from webhooks.service.process_setup import (
        configure_logging,
        missing_key_problem,
        prepare_metrics_dir,
        warn_unknown_variables,
    )
    from webhooks.tables import revisions

    prepare_metrics_dir()  # before any worker imports prometheus_client
    try:
        configure_logging(*config.log_options())
        warn_unknown_variables()
        settings = config.load()
    except ConfigError as exc:  # one line, not a traceback from inside gunicorn
        raise SystemExit(f"Error: configuration: {exc}") from None
    refuse_taken(server)
    if not settings.admin_password:  # once per master, not once per web process
        logging.getLogger("webhooks.web").info(
            "console is off (answers 404) and the admin API takes only named tokens: "
            "set WEBHOOKS_ADMIN_PASSWORD to turn the console on"
        )
    revisions.wait_for_head(settings.database_url, logging.getLogger("webhooks.web"))
    problem = missing_key_problem(settings)
    if problem:  # every web process would fail to build its app: one line, here, instead
        raise SystemExit(f"Error: configuration: {problem}")
    if settings.redis_url is None and settings.embedded_worker:  # each web process runs jobs itself
        from webhooks.worker.job_errors import check_job

        problem = check_job()
        if problem:
            raise SystemExit(f"Error: {problem}")


def refuse_taken(server: Any) -> None:
    """One line and exit 1 if an address to bind is taken, before gunicorn's five tries over 5 s.
    Not for sockets it inherits: a re-executed master's (USR2) or systemd's."""
    from gunicorn import systemd  # type: ignore[import-untyped]

    from webhooks.service.process_setup import bind_problem

    if server.master_pid or systemd.listen_fds(unset_environment=False):
        return
    for address in server.cfg.address:
        if isinstance(address, tuple):  # not a unix socket or a file descriptor
            problem = bind_problem(str(address[0]), int(address[1]))
            if problem:
                raise SystemExit(f"Error: {problem}; set PORT (the Procfile binds ${{PORT:-8000}}) or --bind")


def child_exit(server: Any, worker: Any) -> None:
    from webhooks.metrics import process_exited

    process_exited(worker.pid)
