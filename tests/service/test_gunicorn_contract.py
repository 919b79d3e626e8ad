"""What ``webhooks.service.gunicorn_worker`` relies on in gunicorn beyond its documented API, pinned for the
supported range (pyproject.toml's ``gunicorn`` pin), as tests/worker/test_rq_contract.py pins RQ's:
a gunicorn that renames or reshapes any of it fails here, before a slow end-to-end test times out.

- ``gthread.TConn(cfg, sock, client, server)``: ``initialized``, ``is_http2``, ``parser`` set by
  ``init()`` with a ``SocketUnreader`` (its ``sock``, ``buf`` and ``chunk(size_hint)``) that
  ``Conn.init`` swaps for ``DeadlineUnreader``; ``close(graceful)``; the parser's ``mesg.force_close()``.
- ``gthread.ThreadWorker``: ``accept(listener)`` (``DeadlineWorker.accept`` is a copy making a
  ``Conn``: ``nr_conns``, ``setblocking(True)``, ``enqueue_req``), ``handle(conn)`` whose falsy
  result closes the connection in ``finish_request``, ``handle_request(req, conn)``,
  ``handle_error(req, client, addr, exc)``.
- ``util.close_graceful(sock, timeout=…)``; ``glogging.Logger.setup(cfg)`` and its ``error_log``.
"""

from __future__ import annotations

import inspect
import socket

import pytest
from gunicorn import glogging, util  # type: ignore[import-untyped]
from gunicorn.config import Config  # type: ignore[import-untyped]
from gunicorn.http.message import Request  # type: ignore[import-untyped]
from gunicorn.http.unreader import SocketUnreader  # type: ignore[import-untyped]
from gunicorn.workers import gthread  # type: ignore[import-untyped]

from webhooks.service.gunicorn_worker import Conn, DeadlineUnreader, DeadlineWorker

# (what, the callable, the parameter names it must take, in order, after self)
SIGNATURES: list[tuple[str, type, str, list[str]]] = [
    ("TConn.__init__", gthread.TConn, "__init__", ["cfg", "sock", "client", "server"]),
    ("TConn.init", gthread.TConn, "init", []),
    ("TConn.close", gthread.TConn, "close", ["graceful"]),
    ("SocketUnreader.__init__", SocketUnreader, "__init__", ["sock", "max_chunk"]),
    ("SocketUnreader.chunk", SocketUnreader, "chunk", ["size_hint"]),
    ("ThreadWorker.accept", gthread.ThreadWorker, "accept", ["listener"]),
    ("ThreadWorker.enqueue_req", gthread.ThreadWorker, "enqueue_req", ["conn"]),
    ("ThreadWorker.handle", gthread.ThreadWorker, "handle", ["conn"]),
    ("ThreadWorker.handle_request", gthread.ThreadWorker, "handle_request", ["req", "conn"]),
    ("ThreadWorker.handle_error", gthread.ThreadWorker, "handle_error", ["req", "client", "addr", "exc"]),
    ("ThreadWorker.finish_request", gthread.ThreadWorker, "finish_request", ["conn", "fs"]),
    ("Request.force_close", Request, "force_close", []),
    ("Logger.setup", glogging.Logger, "setup", ["cfg"]),
]
# Lines of gunicorn's own code that DeadlineWorker's copies and overrides depend on, by the function that holds them.
SOURCES: list[tuple[str, type, str, list[str]]] = [
    (
        "ThreadWorker.accept",
        gthread.ThreadWorker,
        "accept",
        [
            "client_sock, client_addr = listener.accept()",
            "self.nr_conns += 1",
            "client_sock.setblocking(True)",
            "TConn(self.cfg, client_sock, client_addr, listener.getsockname())",
            "self.enqueue_req(conn)",
        ],
    ),
    ("ThreadWorker.__init__", gthread.ThreadWorker, "__init__", ["self.nr_conns = 0"]),
    ("ThreadWorker.handle", gthread.ThreadWorker, "handle", ["conn.init()", "self.handle_request(req, conn)"]),
    ("ThreadWorker.finish_request", gthread.ThreadWorker, "finish_request", ["conn.close(graceful=True)"]),
    ("TConn.close", gthread.TConn, "close", ["util.close_graceful(self.sock)"]),
]


def missing() -> list[str]:
    """Every relied-on internal this gunicorn lacks or has reshaped (empty: all there)."""
    found: list[str] = []
    for what, owner, name, names in SIGNATURES:
        try:
            parameters = list(inspect.signature(getattr(owner, name)).parameters)[1:]  # after self
        except (AttributeError, TypeError, ValueError):
            found.append(what)
            continue
        if parameters[: len(names)] != names:
            found.append(f"{what}{tuple(parameters)}")
    if "timeout" not in inspect.signature(util.close_graceful).parameters:
        found.append("util.close_graceful(timeout)")
    for what, owner, name, lines in SOURCES:
        try:
            source = inspect.getsource(getattr(owner, name))
        except (AttributeError, TypeError, OSError):
            found.append(what)
            continue
        found += [f"{what}: {line}" for line in lines if line not in source]
    return found


def test_every_gunicorn_internal_the_deadline_worker_uses_is_there() -> None:
    assert missing() == []


def test_a_gunicorn_that_renames_one_fails_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(gthread.ThreadWorker, "enqueue_req")
    monkeypatch.setattr(gthread.TConn, "close", lambda self, drain=False: None)
    gone = missing()
    assert "ThreadWorker.enqueue_req" in gone
    assert any(item.startswith("TConn.close(") for item in gone)


def test_a_connection_made_as_gunicorn_makes_it_reads_through_the_deadline() -> None:
    """``TConn.init`` still builds the parser and its ``SocketUnreader`` with a ``buf``, which
    ``Conn.init`` replaces by the deadline reader, keeping the bytes read ahead."""
    ours, theirs = socket.socketpair()
    try:
        theirs.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        conn = Conn(Config(), ours, ("127.0.0.1", 1), ("127.0.0.1", 2))
        assert conn.initialized is False and conn.is_http2 is False and conn.parser is None
        conn.init()
        assert conn.initialized is True
        assert isinstance(conn.parser.unreader, DeadlineUnreader)
        conn.start("head", 5.0)
        request = next(conn.parser)
        assert request.method == "GET" and request.path == "/"
        assert hasattr(request, "force_close")
    finally:
        ours.close()
        theirs.close()


def test_the_worker_class_is_gthreads() -> None:
    assert issubclass(DeadlineWorker, gthread.ThreadWorker)
    assert issubclass(Conn, gthread.TConn)
    assert issubclass(DeadlineUnreader, SocketUnreader)
    assert "error_log" in inspect.getsource(glogging.Logger.setup)


def test_the_stop_window_is_under_the_platforms_kill() -> None:
    """The restarts issue: gunicorn's graceful_timeout was 30 s, Heroku's kill time itself; it is
    ``WEBHOOKS_STOP_TIMEOUT`` (25 s by default, a whole number of seconds for gunicorn)."""
    from webhooks.configuration import settings as config
    from webhooks.service import gunicorn_conf

    assert config.load({}).stop_timeout == 25
    assert gunicorn_conf.graceful_timeout == 25 and isinstance(gunicorn_conf.graceful_timeout, int)
