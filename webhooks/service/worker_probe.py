"""The worker's own HTTP listener, on ``WEBHOOKS_WORKER_PORT`` when it is set (containers: a liveness
probe and a scrape per worker pod; docs/deploy.md).

- ``GET /healthz``: 200 ``{"status": "ok", ...}`` while the worker's loop is turning: it beats each
  time it looks for a job (every ``STOP_POLL`` seconds when idle), before each job, and while it waits
  for Redis to come back; 503 ``{"status": "stalled", ...}`` once no beat came for longer than a job
  may run (``WEBHOOKS_JOB_TIMEOUT``) plus a minute. A Redis outage is not a stall: restarting the
  worker would not bring Redis back.
- ``GET /metrics``: what the web's ``/metrics`` shows, from this host's processes (the worker's own
  counters: attempts, job errors, forwards), behind the same admin HTTP Basic auth and login throttle
  (429 ``login_throttled`` after 10 wrong passwords from one address, counted with the web's); 404
  when no admin password is set, as on the web.

It is a thread of the worker's own (the standard library's HTTP server), never in a job's way.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from webhooks.admin.auth import password_check
from webhooks.admin.throttle import LoginThrottle
from webhooks.configuration import settings as config
from webhooks.errors import ConfigError
from webhooks.service import collector
from webhooks.service.process_setup import bind_problem, version
from webhooks.vocabulary import Reason
from webhooks.worker import loop

log = logging.getLogger("webhooks.worker")
GRACE = 60.0  # seconds beyond the job timeout before a silent loop is called stalled
HOST = "0.0.0.0"  # a pod's probe and scrape come from outside the container


def age() -> float:
    """Seconds since the worker's loop last beat (``webhooks.worker.loop.beat``)."""
    return time.monotonic() - loop.BEAT[0]


def problem() -> str | None:
    """Why ``WEBHOOKS_WORKER_PORT`` cannot be served (not a port number, or taken), in one line."""
    try:
        port = config.worker_port()
    except ConfigError as exc:
        return f"configuration: {exc}"
    taken = bind_problem(HOST, port) if port is not None else None
    return f"WEBHOOKS_WORKER_PORT: {taken}" if taken else None


def start(rt: Any) -> ThreadingHTTPServer | None:
    """The listener on ``WEBHOOKS_WORKER_PORT`` (None: not set), on a daemon thread of its own."""
    port = config.worker_port()
    return None if port is None else serve(rt, port)


def serve(rt: Any, port: int, host: str = HOST) -> ThreadingHTTPServer:
    """Start the listener on a daemon thread; the caller shuts it down (``server.shutdown()``)."""
    limit = rt.settings.job_timeout + GRACE
    shared = rt.queue.connection if rt.settings.redis_url else None
    throttle = LoginThrottle(shared, deployment=rt.settings.queue_name)

    class Handler(BaseHTTPRequestHandler):
        server_version = "webhooks-worker"

        def do_GET(self) -> None:  # the standard library's name
            path = self.path.split("?", 1)[0]
            if path == "/healthz":
                silent = age()
                answer = {"status": "stalled" if silent > limit else "ok", "version": version(),
                          "process": "worker", "beat_age_seconds": round(silent, 1)}  # fmt: skip
                self._json(503 if silent > limit else 200, answer)
            elif path == "/metrics":
                self._metrics()
            else:
                self._json(404, {"error": "not_found"})

        def _metrics(self) -> None:
            password = rt.settings.admin_password
            if not password:
                self._json(404, {"error": "not_found"})
                return
            # The web's check and throttle, its buckets shared through Redis: a guess here counts there.
            right, wait, _ = password_check(
                throttle, self.client_address[0], self.headers.get("Authorization"), password
            )
            if wait:
                self._json(429, {"error": Reason.LOGIN_THROTTLED}, ("Retry-After", str(wait)))
            elif not right:
                self._json(401, {"error": "unauthorized"}, ("WWW-Authenticate", 'Basic realm="webhooks admin"'))
            else:
                self._send(200, *collector.exposition(rt))

        def _json(self, status: int, value: dict[str, Any], *extra: tuple[str, str]) -> None:
            self._send(status, json.dumps(value).encode(), "application/json", *extra)

        def _send(self, status: int, body: bytes, content_type: str, *extra: tuple[str, str]) -> None:
            self.send_response(status)
            for name, value in extra:
                self.send_header(name, value)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # probes are not news
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    # Its stop flag looked at every 0.1 s (socketserver's default, 0.5 s, added that to every worker stop).
    threading.Thread(target=server.serve_forever, args=(0.1,), name="webhooks-worker-probe", daemon=True).start()
    log.info("worker: /healthz and /metrics on port %d", port)
    return server
