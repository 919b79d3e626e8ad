"""The HTTP client of forwarding: POSTs to one destination URL, over connections the guard vetted.

Every new connection resolves the host through ``guard.vet`` and connects to a vetted address
itself (http.client only writes the request and parses the answer, it never looks the name up), so
the address checked is the address connected. No redirect is followed: a 3xx is an answer. Each
thread keeps one keep-alive connection; a request that fails on a reused connection before any
byte of the answer (the server closed it while idle) is sent once more on a fresh one.

Time: ``timeout`` bounds the name's resolution and the connect together (TLS included; a lookup
runs on a helper thread, ``guard.resolve_within``) and each read, and the answer as a whole is
given ``timeout`` from the moment of sending (a deadline each read checks), so a server that drips
one byte at a time holds a thread for about 2 × timeout at most.

Standard library only (certifi's trust roots when installed).
"""

from __future__ import annotations

import http.client
import math
import socket
import ssl
import threading
import time
import urllib.parse
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from webhooks.configuration.destinations import redacted
from webhooks.guard import Refused, Resolver, resolve_within, system_resolver, vet

RESPONSE_LIMIT = 64 * 1024
USER_AGENT = "webhooks-forwarder/1"


@dataclass(frozen=True)
class Response:
    status: int
    headers: Mapping[str, str]  # lower-case names
    body: bytes  # at most RESPONSE_LIMIT bytes
    seconds: float  # from sending to the end of reading


class SendError(Exception):
    """No HTTP answer. ``reason``: "refused" (the guard), "timeout", "connect", "tls" or "protocol".
    The message names the destination and what failed, never a header value (secrets travel there)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class _Deadline(socket.socket):
    """A socket whose reads give up at ``deadline`` (time.monotonic) and wait ``per_read`` at most
    each; ``received`` counts the bytes read since the last request was sent."""

    deadline = math.inf
    per_read = math.inf
    received = 0

    def recv_into(self, buffer: Any, *args: Any, **kwargs: Any) -> int:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the answer took longer than the timeout")
        self.settimeout(min(self.per_read, remaining))
        count: int = super().recv_into(buffer, *args, **kwargs)
        self.received += count
        return count


class _DeadlineTLS(_Deadline, ssl.SSLSocket):
    """The TLS socket of an https connection, with the same deadline (``SSLContext.sslsocket_class``)."""


class _Connection(http.client.HTTPConnection):
    """http.client's request writing and answer parsing over a socket ``opener`` opened (never its own)."""

    def __init__(self, host: str, port: int, timeout: float, opener: Callable[[], _Deadline]) -> None:
        super().__init__(host, port, timeout=timeout)
        self._opener = opener
        self.line: _Deadline | None = None

    def connect(self) -> None:
        self.line = self._opener()
        self.sock = self.line

    def close(self) -> None:
        super().close()
        self.line = None

    def __del__(self) -> None:
        self.close()  # a thread's connection ends with its thread (its threading.local lets go of it)


class Sender:
    """POSTs to ``url``; thread-safe, one keep-alive connection per thread. A URL that is not http(s)
    with a host raises Refused("bad_url") here; the guard's other refusals come from ``post``."""

    def __init__(self, url: str, *, timeout: float, allow_private: bool, resolver: Resolver = system_resolver) -> None:
        try:
            parts = urllib.parse.urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise Refused("bad_url", f"{redacted(url)!r}: {exc}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise Refused("bad_url", f"{redacted(url)!r}: a destination URL is http:// or https:// with a host")
        default = 443 if parts.scheme == "https" else 80
        self.host = parts.hostname
        self.port = port or default
        self.timeout = timeout
        self._allow_private = allow_private
        self._resolver = resolver
        self._target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        bracketed = f"[{self.host}]" if ":" in self.host else self.host
        self._host_header = bracketed if self.port == default else f"{bracketed}:{self.port}"
        self._origin = f"{parts.scheme}://{bracketed}:{self.port}"  # in messages: never the path or query
        self._tls: ssl.SSLContext | None = None
        if parts.scheme == "https":
            self._tls = _tls_context()
        self._local = threading.local()
        self._all: weakref.WeakSet[_Connection] = weakref.WeakSet()
        self._lock = threading.Lock()

    def post(self, body: bytes, headers: Mapping[str, str]) -> Response:
        """POST ``body``; any HTTP status is a Response, no answer raises SendError."""
        request = {k: v for k, v in headers.items() if k.lower() not in ("host", "content-length")}
        if not any(k.lower() == "user-agent" for k in request):
            request["User-Agent"] = USER_AGENT
        request["Host"] = self._host_header
        request["Content-Length"] = str(len(body))
        connection = self._connection()
        fresh = connection.line is None
        if fresh:
            connection.connect()
        try:
            return self._exchange(connection, body, request)
        except _Stale:
            if fresh:
                raise SendError("connect", f"{self._origin}: the connection closed before an answer") from None
            connection.connect()  # _exchange closed the stale one
            try:
                return self._exchange(connection, body, request)
            except _Stale:
                raise SendError("connect", f"{self._origin}: the connection closed before an answer") from None

    def close(self) -> None:
        """Close every thread's connection (a later ``post`` opens a new one)."""
        with self._lock:
            connections = list(self._all)
        for connection in connections:
            connection.close()

    def _connection(self) -> _Connection:
        connection: _Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = _Connection(self.host, self.port, self.timeout, self._open)
            with self._lock:
                self._all.add(connection)
        return connection

    def _open(self) -> _Deadline:
        """A connected socket (TLS done) to a vetted address of the host."""
        deadline = time.monotonic() + self.timeout  # the name's resolution, the connect and TLS share it
        try:
            resolver = resolve_within(self._resolver, self.timeout)
            addresses = vet(self.host, self.port, allow_private=self._allow_private, resolver=resolver)
        except Refused as exc:
            if isinstance(exc.__cause__, TimeoutError):
                raise SendError("timeout", f"{self._origin}: resolving the name took over {self.timeout} s") from None
            raise SendError("refused", f"{self._origin}: refused by the guard ({exc.reason}): {exc}") from None
        failure: OSError = TimeoutError()
        for address in addresses:
            line = _Deadline(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM)
            try:
                line.per_read = self.timeout
                line.settimeout(max(deadline - time.monotonic(), 0.001))
                line.connect((address, self.port))
                line.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                break
            except OSError as exc:
                line.close()
                failure = exc
        else:
            if isinstance(failure, TimeoutError):
                raise SendError("timeout", f"{self._origin}: connecting timed out after {self.timeout} s")
            raise SendError("connect", f"{self._origin}: cannot connect ({failure.__class__.__name__}: {failure})")
        if self._tls is None:
            return line
        try:
            secure = self._tls.wrap_socket(line, server_hostname=self.host)
        except TimeoutError:
            line.close()
            raise SendError("timeout", f"{self._origin}: the TLS handshake timed out after {self.timeout} s") from None
        except OSError as exc:  # ssl.SSLError (a bad certificate too) or the connection lost mid-handshake
            line.close()
            raise SendError("tls", f"{self._origin}: TLS failed ({exc.__class__.__name__}: {exc})") from None
        return cast(_DeadlineTLS, secure)  # the context's sslsocket_class

    def _exchange(self, connection: _Connection, body: bytes, headers: dict[str, str]) -> Response:
        """One request and its answer on ``connection``; raises _Stale when it failed before any byte
        of the answer with the connection lost, SendError otherwise."""
        line = connection.line
        assert line is not None
        started = time.monotonic()
        line.deadline, line.per_read, line.received = started + self.timeout, self.timeout, 0
        line.settimeout(self.timeout)
        try:
            connection.request("POST", self._target, body=body, headers=headers)
            answer = connection.getresponse()
            chunks: list[bytes] = []
            size = 0
            while size <= RESPONSE_LIMIT and (chunk := answer.read(RESPONSE_LIMIT + 1 - size)):
                chunks.append(chunk)
                size += len(chunk)
            if size > RESPONSE_LIMIT or not answer.isclosed():  # cut: the rest of the body is still coming
                connection.close()
        except TimeoutError:
            connection.close()
            raise SendError("timeout", f"{self._origin}: no complete answer within {self.timeout} s") from None
        except (ConnectionError, ssl.SSLEOFError) as exc:  # RemoteDisconnected is a ConnectionError
            stale = line.received == 0
            connection.close()
            if stale:
                raise _Stale from exc
            raise SendError("connect", f"{self._origin}: the connection broke ({exc.__class__.__name__})") from None
        except ssl.SSLError as exc:
            connection.close()
            raise SendError("tls", f"{self._origin}: TLS failed ({exc.__class__.__name__}: {exc})") from None
        except (http.client.HTTPException, OSError) as exc:
            connection.close()
            raise SendError("protocol", f"{self._origin}: a bad answer ({exc.__class__.__name__})") from None
        except ValueError:  # http.client's check of header names and values: its message quotes the value
            connection.close()
            raise SendError("protocol", f"{self._origin}: a header name or value is not valid HTTP") from None
        return Response(
            status=answer.status,
            headers=_lower(answer.getheaders()),
            body=b"".join(chunks)[:RESPONSE_LIMIT],
            seconds=time.monotonic() - started,
        )


def _lower(fields: list[tuple[str, str]]) -> dict[str, str]:
    """Header fields by lower-case name; a repeated field's values joined with ", " (RFC 9110 5.3)."""
    headers: dict[str, str] = {}
    for name, value in fields:
        key = name.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return headers


class _Stale(Exception):
    """The connection was lost before any byte of the answer (a reused one may have been closed idle)."""


def _tls_context() -> ssl.SSLContext:
    try:
        import certifi
    except ImportError:  # the system's trust roots
        context = ssl.create_default_context()
    else:
        context = ssl.create_default_context(cafile=certifi.where())
    context.sslsocket_class = _DeadlineTLS
    return context
