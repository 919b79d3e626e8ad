"""``webhooks.outbound``: the one HTTP client of the calls out (PayPal, ``webhooks send``), against a
small HTTP server on 127.0.0.1."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.support.servers import serve_in_thread
from webhooks import outbound
from webhooks.errors import VerificationError
from webhooks.providers.paypal_certs import CertLoader

SEEN: list[str] = []


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        SEEN.append(self.path)
        if self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "/ok")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        status, body = {"/ok": (200, b"fine"), "/big": (200, b"x" * 100)}.get(self.path, (404, b"no such thing"))
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(201)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[::-1])

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def base() -> Iterator[str]:
    SEEN.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    serve_in_thread(server)
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_every_status_is_an_answer(base: str) -> None:
    assert outbound.call(f"{base}/ok") == outbound.Answer(200, b"fine")
    assert outbound.call(f"{base}/nothing") == outbound.Answer(404, b"no such thing")
    assert outbound.call(f"{base}/echo", method="POST", data=b"abc") == outbound.Answer(201, b"cba")


def test_redirects_are_followed_or_answered_as_they_are(base: str) -> None:
    assert outbound.call(f"{base}/moved") == outbound.Answer(200, b"fine")
    SEEN.clear()
    assert outbound.call(f"{base}/moved", redirects=False).status == 302
    assert SEEN == ["/moved"]  # the redirect's target was never asked for


def test_a_limit_reads_one_byte_past_it(base: str) -> None:
    assert len(outbound.call(f"{base}/big", limit=10).body) == 11
    assert len(outbound.call(f"{base}/big", limit=100).body) == 100


def test_no_answer_at_all_is_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: refused
    with pytest.raises(outbound.Unreachable, match=f"127.0.0.1:{port}"):
        outbound.call(f"http://127.0.0.1:{port}/", timeout=2)


def test_a_certificate_fetch_refuses_a_redirect(base: str) -> None:
    """A redirect could leave PayPal's hosts: the fetch fails as a bad signature, never follows it."""
    with pytest.raises(VerificationError, match="answered 302"):
        CertLoader(timeout=2)._fetch(f"{base}/moved")
    assert SEEN == ["/moved"]
