"""A destination service on 127.0.0.1 for the forwarding tests: it verifies every request with the
``standardwebhooks`` package (the oracle), records what it got, and answers as told.

``answer`` decides each response: a callable given the request number and the request, returning
``(status, headers, body)``; ``hang`` makes it never answer (until the server stops).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook

from tests.support.servers import serve_in_thread

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # the Standard Webhooks specification's example
SECRET_2 = "whsec_dGVzdC1zZWNvbmQta2V5LWZvci1yb3RhdGlvbi0x"


@dataclass
class Seen:
    """One request as the destination got it."""

    headers: dict[str, str]
    body: bytes
    verified: bool
    path: str = ""  # the request target: path and query string, as sent

    @property
    def id(self) -> str:
        return self.headers["webhook-id"]

    @property
    def version(self) -> int | None:
        value = self.headers.get("webhooks-object-version")
        return None if value is None else int(value)


Answer = tuple[int, dict[str, str], bytes]


@dataclass
class Destination:
    url: str
    secret: str = SECRET
    seen: list[Seen] = field(default_factory=list)
    answer: Callable[[int, Seen], Answer] = lambda n, seen: (200, {}, b"ok")
    hang: threading.Event = field(default_factory=threading.Event)  # set: never answer
    released: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def verified(self) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if s.verified]

    def ids(self) -> list[str]:
        return [s.headers.get("webhooks-event-id", "") for s in self.verified()]


def _handler(dest: Destination) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k.lower(): v for k, v in self.headers.items()}
            try:
                Webhook(dest.secret).verify(body, headers)
                verified = True
            except Exception:
                verified = False
            seen = Seen(headers, body, verified, self.path)
            with dest.lock:
                dest.seen.append(seen)
                number = len(dest.seen)
            if dest.hang.is_set():
                dest.released.wait(60)
                self.close_connection = True  # released: the sender sees the connection end now
                return
            status, extra, reply = dest.answer(number, seen)
            self.send_response(status)
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def running(secret: str = SECRET) -> Iterator[Destination]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    dest = Destination(f"http://127.0.0.1:{server.server_address[1]}/hooks", secret)
    server.RequestHandlerClass = _handler(dest)
    server.daemon_threads = True
    serve_in_thread(server)
    try:
        yield dest
    finally:
        dest.released.set()
        server.shutdown()
        server.server_close()


def config(dest: Destination, **extra: Any) -> dict[str, Any]:
    """A ``[destinations.<name>]`` table for ``dest`` (loopback: ``allow_private``)."""
    return {"url": dest.url, "secrets": [dest.secret], "allow_private": True, **extra}
