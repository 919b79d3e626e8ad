"""Slow senders: connections that drip a request a byte at a time, as a slowloris attack does.

``Drippers`` opens its connections at once and, on one thread of its own, sends each of them the
next byte of its request every ``interval`` seconds until told to stop; it keeps dripping after
the server answers (a hostile client does not stop), and records what the server sent back.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from collections.abc import Iterator

from tests.conftest import stripe_event, stripe_headers


def head_dripper(port: int) -> tuple[bytes, bytes]:
    """(sent at once, dripped): a request head that never ends."""
    return b"P", b"OST /webhooks/stripe HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 10_000


def body_dripper(port: int) -> tuple[bytes, bytes]:
    """(sent at once, dripped): a genuine signed head, then its body a byte at a time."""
    body = stripe_event("evt_dripped")
    head = "".join(f"{k}: {v}\r\n" for k, v in stripe_headers(body).items())
    start = f"POST /webhooks/stripe HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {len(body)}\r\n{head}\r\n"
    return start.encode() + body[:1], body[1:]


class Drippers:
    """``count`` connections to ``port`` dripping what ``kind`` gives, one byte each per ``interval``."""

    def __init__(self, port: int, count: int, kind: str, interval: float = 0.5) -> None:
        make = {"head": head_dripper, "body": body_dripper}[kind]
        self.interval = interval
        self.sockets: list[socket.socket] = []
        self.left: dict[socket.socket, bytes] = {}
        self.sent: dict[socket.socket, int] = {}
        self.answers: dict[socket.socket, bytes] = {}  # what the server sent; b"" for a bare close
        self._stop = threading.Event()
        self._selector = selectors.DefaultSelector()
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            first, rest = make(port)
            sock.sendall(first)
            sock.setblocking(False)
            self.sockets.append(sock)
            self.left[sock], self.sent[sock] = rest, len(first)
            self._selector.register(sock, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for sock in self.sockets:
                rest = self.left[sock]
                if rest:
                    with contextlib.suppress(OSError):  # closed by the server: a hostile client tries anyway
                        sock.send(rest[:1])
                        self.left[sock], self.sent[sock] = rest[1:], self.sent[sock] + 1
            for key, _ in self._selector.select(timeout=self.interval):
                sock = key.fileobj  # type: ignore[assignment]
                try:
                    data = sock.recv(65536)
                except OSError:  # reset
                    data = b""
                self.answers[sock] = self.answers.get(sock, b"") + data
                if not data:
                    self._selector.unregister(sock)

    def dripping(self, minimum: int) -> bool:
        """Every connection has sent at least ``minimum`` bytes, and none was answered yet."""
        return not self.answers and all(n >= minimum for n in self.sent.values())

    def still_open(self) -> int:
        """How many connections the server has neither answered nor closed."""
        return len(self.sockets) - len(self.answers)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._selector.close()
        for sock in self.sockets:
            sock.close()


@contextlib.contextmanager
def dripping(port: int, count: int, kind: str, interval: float = 0.5) -> Iterator[Drippers]:
    drippers = Drippers(port, count, kind, interval)
    try:
        yield drippers
    finally:
        drippers.close()
