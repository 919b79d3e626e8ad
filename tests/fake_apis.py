"""Small HTTP servers on 127.0.0.1 that play providers' APIs in the tests (never the network)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.support.servers import serve_in_thread

# (method, path, query, headers, body) → (status, JSON answer)
Route = Callable[[str, str, dict[str, list[str]], Any, bytes], tuple[int, Any]]


@contextmanager
def serve(route: Route, drip: Callable[[], float] = lambda: 0.0) -> Iterator[str]:
    """Serve ``route`` on a free port; yields the base URL. ``drip()``: seconds over which each
    answer's body is sent, a few bytes at a time (a slow API that never trips a read timeout)."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            status, answer = route(self.command, parts.path, parse_qs(parts.query), self.headers, body)
            raw = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            seconds = drip()
            if seconds <= 0:
                self.wfile.write(raw)
                return
            pieces = [raw[i : i + 8] for i in range(0, len(raw), 8)]
            for piece in pieces:  # paced bytes: the network's slowness, not an order of events
                self.wfile.write(piece)
                self.wfile.flush()
                time.sleep(seconds / len(pieces))

        do_GET = do_POST = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    serve_in_thread(server)
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def gated(route: Route, gate: threading.Event, calls: list[str]) -> Route:
    """``route`` behind ``gate``: every request is counted in ``calls`` (its path), then hangs until
    the gate opens (a provider API that hangs, or drips, until the test lets it answer)."""

    def hanging(method: str, path: str, query: dict[str, list[str]], headers: Any, body: bytes) -> tuple[int, Any]:
        calls.append(path)
        gate.wait()
        return route(method, path, query, headers, body)

    return hanging


def not_found(method: str, path: str, query: dict[str, list[str]], headers: Any, body: bytes) -> tuple[int, Any]:
    """An API that has no such object (a junk id's answer)."""
    return 404, {"status": 404, "title": "Not Found"}
