"""gunicorn's gthread worker with a deadline per request: its head must arrive within
``head_timeout`` seconds of a thread taking it up, then its body within ``body_timeout``; a
request that misses its deadline is answered 408 ``request_timeout`` and its connection closed.

gthread reads a request in one of its threads with blocking reads and no deadline, so a client
that drips a byte a second holds the thread for as long as it likes (24 such connections stopped
the Procfile's 2 × 4 threads). Here every read is bounded by the time left before the deadline.
Closing a connection also lingers (RFC 9112 § 9.6) in the request's thread, not on the main
loop, which otherwise stalled up to 2 s for each peer that keeps sending after its answer.

Used as ``worker_class = "webhooks.service.gunicorn_worker.DeadlineWorker"`` (``webhooks.service.gunicorn_conf``).
The gthread internals it extends are pinned by tests/service/test_gunicorn_contract.py.
"""

from __future__ import annotations

import errno
import logging
import socket
import sys
import time
from typing import Any

from gunicorn import glogging, util  # type: ignore[import-untyped]  # gunicorn ships no type hints
from gunicorn.http.unreader import SocketUnreader  # type: ignore[import-untyped]
from gunicorn.workers import gthread  # type: ignore[import-untyped]

from webhooks.service import gunicorn_conf
from webhooks.vocabulary import Reason

log = logging.getLogger("webhooks.web")
LINGER = 1.0  # seconds a closing connection may still drain the peer's bytes (gunicorn's own: 2)
TIMEOUT_BODY = b'{"error":"%s"}\n' % Reason.REQUEST_TIMEOUT.encode()
TIMEOUT_ANSWER = (
    b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(TIMEOUT_BODY), TIMEOUT_BODY)
)


class HeadTimeoutError(Exception):
    """The request head was not complete by its deadline (answered 408 by the worker)."""


class BodyTimeoutError(TimeoutError):
    """The request body was not complete by its deadline: a ``TimeoutError``, which the
    receiver's body reader (``receive.read_body``) answers 408 like any other read timeout."""


class Conn(gthread.TConn):  # type: ignore[misc]  # gunicorn ships no type hints
    """A connection whose reads stop at ``deadline`` (``time.monotonic()``; ``None``: no limit)."""

    deadline: float | None = None
    phase = "head"
    limit = 0.0  # seconds the current phase may take
    expired = False  # a deadline passed: close, never keep alive
    closed = False  # closed in its thread already

    def init(self) -> None:
        first = not self.initialized
        super().init()
        if first and not self.is_http2 and type(self.parser.unreader) is SocketUnreader:
            unreader = DeadlineUnreader(self.sock, self)
            unreader.buf = self.parser.unreader.buf  # bytes an HTTP/2 preface check gave back
            self.parser.unreader = unreader

    def expire(self) -> Exception:
        self.expired = True
        if self.phase == "head":
            return HeadTimeoutError(f"request head incomplete after {self.limit} s")
        self.parser.mesg.force_close()  # the 408 says ``Connection: close``, as it is
        return BodyTimeoutError(f"request body incomplete after {self.limit} s")

    def start(self, phase: str, limit: float) -> None:
        """Reads from now on are for ``phase`` and must be done within ``limit`` seconds."""
        self.phase, self.limit, self.deadline = phase, limit, time.monotonic() + limit

    def close(self, graceful: bool = False) -> None:
        if not self.closed:
            super().close(graceful)


class DeadlineUnreader(SocketUnreader):  # type: ignore[misc]
    """gunicorn's socket reader, each ``recv`` bounded by the time left before ``conn.deadline``
    (and by a shorter timeout already set on the socket, the receiver's idle read timeout)."""

    def __init__(self, sock: socket.socket, conn: Conn) -> None:
        super().__init__(sock)
        self.conn = conn

    def chunk(self, size_hint: int | None = None) -> bytes:
        deadline = self.conn.deadline
        if deadline is None:
            return super().chunk(size_hint)  # type: ignore[no-any-return]
        left = deadline - time.monotonic()
        if left <= 0:
            raise self.conn.expire()
        prior = self.sock.gettimeout()
        if prior == 0:  # non-blocking: nothing waits, nothing to bound
            return super().chunk(size_hint)  # type: ignore[no-any-return]
        self.sock.settimeout(left if prior is None else min(prior, left))
        try:
            return super().chunk(size_hint)  # type: ignore[no-any-return]
        except TimeoutError:
            if time.monotonic() >= deadline:
                raise self.conn.expire() from None
            raise
        finally:
            self.sock.settimeout(prior)


class DeadlineWorker(gthread.ThreadWorker):  # type: ignore[misc]
    """gthread, its connections reading against a deadline; see the module docstring."""

    def handle_exit(self, sig: int, frame: Any) -> None:
        """SIGTERM: stop as gthread does, and end the event stream's listeners now (each holds a
        thread; its client resumes from its cursor), so the stop is not held to graceful_timeout."""
        super().handle_exit(sig, frame)
        stream = sys.modules.get("webhooks.admin.stream")  # imported with the app: no import here
        if stream is not None:
            stream.close_all()

    def accept(self, listener: socket.socket) -> None:
        """gthread's ``accept``, making a ``Conn`` instead of a ``TConn``."""
        try:
            client_sock, client_addr = listener.accept()
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        client_sock.setblocking(True)
        self.enqueue_req(Conn(self.cfg, client_sock, client_addr, listener.getsockname()))

    def handle(self, conn: Conn) -> Any:
        conn.start("head", gunicorn_conf.head_timeout)
        result = super().handle(conn)
        conn.deadline = None
        if result is False:  # to be closed: linger here, not in the main loop's ``finish_request``
            util.close_graceful(conn.sock, timeout=LINGER)
            conn.closed = True
        return result

    def handle_request(self, req: Any, conn: Conn) -> bool:
        conn.start("body", gunicorn_conf.body_timeout)
        try:
            keep = super().handle_request(req, conn)
        except BodyTimeoutError as exc:  # read by an app other than the receiver, which answers it itself
            self.answer_timeout(conn.sock, conn.client, exc)
            return False
        finally:
            conn.deadline = None
        return bool(keep) and not conn.expired  # the unread rest of a late body is not drained

    def answer_timeout(self, client: socket.socket, addr: Any, exc: Exception) -> None:
        """408 ``request_timeout`` and one log line; a peer that reads nothing does not hold the thread."""
        log.info("408 %s from %s: %s", Reason.REQUEST_TIMEOUT, addr[0] if addr else "?", exc)
        try:
            client.settimeout(LINGER)
            client.sendall(TIMEOUT_ANSWER)
        except OSError:
            pass

    def handle_error(self, req: Any, client: socket.socket, addr: Any, exc: BaseException) -> None:
        if isinstance(exc, HeadTimeoutError):
            self.answer_timeout(client, addr, exc)
        else:
            super().handle_error(req, client, addr, exc)


class RootLogger(glogging.Logger):  # type: ignore[misc]  # gunicorn ships no type hints
    """gunicorn's logger with its error log (start, stop, worker boots) written by the root
    logger's handler (``webhooks.service.process_setup.configure_logging``): one format for every line a
    process prints, not gunicorn's own beside it. The access log stays gunicorn's (off by default)."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        if not logging.getLogger().handlers:  # before on_starting: gunicorn's first lines are ours too
            from webhooks.configuration import settings as config
            from webhooks.errors import ConfigError
            from webhooks.service.process_setup import configure_logging

            try:
                configure_logging(*config.log_options())
            except ConfigError:  # on_starting says it in one line
                pass
        self.error_log.handlers[:] = []
        self.error_log.propagate = True
