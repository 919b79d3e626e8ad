"""The forwarding client against local servers on 127.0.0.1: answers of every status, keep-alive
counted on the server side, no redirect followed, bodies cut at the limit, deadlines, the guard at
connect time, and many threads on one sender."""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import certifi
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.conftest import free_port, wait_until
from tests.support.servers import serve_in_thread
from webhooks.forward.client import RESPONSE_LIMIT, Sender, SendError
from webhooks.guard import Resolver, system_resolver

Reply = Callable[["Handler", int], None]  # the handler, the request's index on its server
GIVEN_UP = 5.0  # seconds: a timeout of 0.5 s has given up well within this, on a machine twice as slow


class Server(ThreadingHTTPServer):
    """Records connections and requests; ``reply`` answers each request."""

    daemon_threads = True
    request_queue_size = 64  # 20 threads connect at once

    def __init__(self, reply: Reply, idle: float | None) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.reply, self.idle = reply, idle
        self.lock = threading.Lock()
        self.release = threading.Event()  # set at the end of the test: frees a reply that waits
        self.connections = self.closed = 0
        self.requests: list[tuple[str, dict[str, str], bytes]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    server: Server

    def setup(self) -> None:
        self.timeout = self.server.idle  # a server that closes idle keep-alive connections
        super().setup()
        with self.server.lock:
            self.server.connections += 1

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.server.lock:
                self.server.closed += 1

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with self.server.lock:
            self.server.requests.append((self.path, dict(self.headers.items()), body))
            index = len(self.server.requests) - 1
        self.server.reply(self, index)

    def answer(self, status: int, body: bytes = b"hello", **headers: str) -> None:
        self.send_response(status)
        for name, value in {"X-Reply": "yes", **headers}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def ok(handler: Handler, index: int) -> None:
    handler.answer(200)


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def start(reply: Reply = ok, idle: float | None = None, tls: ssl.SSLContext | None = None) -> Server:
        server = Server(reply, idle)
        if tls is not None:
            server.socket = tls.wrap_socket(server.socket, server_side=True)
        serve_in_thread(server)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.release.set()
        server.shutdown()
        server.server_close()


@pytest.fixture
def sender() -> Iterator[Callable[..., Sender]]:
    senders: list[Sender] = []

    def make(
        url: str, *, timeout: float = 10.0, allow_private: bool = True, resolver: Resolver = system_resolver
    ) -> Sender:
        senders.append(Sender(url, timeout=timeout, allow_private=allow_private, resolver=resolver))
        return senders[-1]

    yield make
    for made in senders:
        made.close()


def to_loopback(host: str, port: int) -> list[str]:
    """A resolver for made-up names (``dest.test``): the guard's lookup is the only one there is."""
    return ["127.0.0.1"]


def counting(lookups: list[str]) -> Resolver:
    def resolve(host: str, port: int) -> list[str]:
        lookups.append(host)
        return to_loopback(host, port)

    return resolve


def test_post_returns_the_answer_and_the_server_sees_the_request(serve: Any, sender: Any) -> None:
    server = serve()
    response = sender(server.url + "/in?team=a").post(
        b'{"id": 1}', {"Content-Type": "application/json", "Webhook-Signature": "v1,abc"}
    )
    assert (response.status, response.body, response.headers["x-reply"]) == (200, b"hello", "yes")
    assert response.headers["content-length"] == "5" and all(name == name.lower() for name in response.headers)
    assert 0 < response.seconds < 10
    [(path, headers, body)] = server.requests
    assert (path, body) == ("/in?team=a", b'{"id": 1}')
    assert headers["Webhook-Signature"] == "v1,abc" and headers["Content-Type"] == "application/json"
    assert headers["Host"] == f"127.0.0.1:{server.server_address[1]}"
    assert headers["User-Agent"] == "webhooks-forwarder/1" and headers["Content-Length"] == "9"


def test_a_given_user_agent_is_kept_and_any_status_is_an_answer(serve: Any, sender: Any) -> None:
    server = serve(lambda handler, index: handler.answer(503, b"busy"))
    response = sender(server.url).post(b"", {"user-agent": "team-bot/2"})
    assert (response.status, response.body) == (503, b"busy")
    assert server.requests[0][1]["user-agent"] == "team-bot/2" and server.requests[0][0] == "/"


def repeated(handler: Handler, index: int) -> None:
    handler.send_response(204)
    handler.send_header("X-Multi", "a")
    handler.send_header("x-multi", "b")
    handler.end_headers()


def test_a_repeated_header_field_is_one_entry_with_the_values_joined(serve: Any, sender: Any) -> None:
    response = sender(serve(repeated).url).post(b"", {})
    assert (response.status, response.body, response.headers["x-multi"]) == (204, b"", "a, b")


def test_keep_alive_reuses_one_connection_vetted_once(serve: Any, sender: Any) -> None:
    server = serve()
    lookups: list[str] = []
    client = sender(
        f"http://dest.test:{server.server_address[1]}/",
        resolver=counting(lookups),
    )
    assert [client.post(b"%d" % i, {}).status for i in range(10)] == [200] * 10
    assert [body for _, _, body in server.requests] == [b"%d" % i for i in range(10)]
    assert server.connections == 1 and lookups == ["dest.test"]


def test_a_redirect_is_returned_not_followed(serve: Any, sender: Any) -> None:
    other = serve()
    server = serve(lambda handler, index: handler.answer(302, b"", Location=other.url + "/"))
    response = sender(server.url).post(b"{}", {})
    assert (response.status, response.headers["location"]) == (302, other.url + "/")
    assert other.connections == 0 and other.requests == []


def big_then_ok(handler: Handler, index: int) -> None:
    if index > 0:
        return handler.answer(200)
    pattern = bytes(range(256)) * 4096  # 1 MiB
    handler.send_response(200)
    handler.send_header("Content-Length", str(len(pattern)))
    handler.end_headers()
    try:
        handler.wfile.write(pattern)
    except OSError:  # the client hung up after its 64 KiB
        handler.close_connection = True


def test_a_long_body_is_cut_and_the_next_post_reconnects(serve: Any, sender: Any) -> None:
    server = serve(big_then_ok)
    client = sender(server.url)
    first = client.post(b"1", {})
    assert first.status == 200 and first.body == (bytes(range(256)) * 4096)[:RESPONSE_LIMIT]
    assert client.post(b"2", {}).body == b"hello"
    assert server.connections == 2


def silent(handler: Handler, index: int) -> None:
    handler.server.release.wait(2 * GIVEN_UP)  # a client that does not give up fails, it does not hang
    handler.close_connection = True


def drip(handler: Handler, index: int) -> None:
    """A status line, then one header byte every 0.1 s: no read ever waits as long as the timeout."""
    handler.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
    until = time.monotonic() + 2 * GIVEN_UP
    while not handler.server.release.wait(0.1) and time.monotonic() < until:
        handler.wfile.write(b"x")
    handler.close_connection = True


@pytest.mark.parametrize("reply", [silent, drip])
def test_a_server_that_does_not_answer_in_time_is_a_timeout(serve: Any, sender: Any, reply: Reply) -> None:
    server = serve(reply)
    client = sender(server.url, timeout=0.5)
    started = time.monotonic()
    with pytest.raises(SendError) as caught:
        client.post(b"{}", {"Authorization": "Bearer tok-s3cret"})
    assert time.monotonic() - started < GIVEN_UP
    assert caught.value.reason == "timeout" and "s3cret" not in str(caught.value)
    assert len(server.requests) == 1


def test_a_slow_resolver_ends_the_attempt_within_its_timeout(serve: Any, sender: Any) -> None:
    """A name whose lookup hangs ends the attempt as a timeout inside the delivery's lease (2 ×
    timeout + a margin), never as a send once the lease is gone (issue 30)."""
    server = serve()
    release = threading.Event()

    def slow(host: str, port: int) -> list[str]:
        release.wait(30)
        return ["127.0.0.1"]

    client = sender(f"http://slow.test:{server.server_address[1]}/", timeout=0.5, resolver=slow)
    started = time.monotonic()
    try:
        with pytest.raises(SendError) as caught:
            client.post(b"{}", {})
        assert time.monotonic() - started < GIVEN_UP
        assert caught.value.reason == "timeout" and "resolving" in str(caught.value)
        assert server.connections == 0
    finally:
        release.set()


def test_a_closed_port_is_a_connect_error(sender: Any) -> None:
    with pytest.raises(SendError) as caught:
        sender(f"http://127.0.0.1:{free_port()}/").post(b"{}", {})
    assert caught.value.reason == "connect"


def test_loopback_is_refused_without_allow_private(serve: Any, sender: Any) -> None:
    server = serve()
    with pytest.raises(SendError) as caught:
        sender(server.url + "/", allow_private=False).post(b"{}", {})
    assert caught.value.reason == "refused" and "private_address" in str(caught.value)
    assert server.connections == 0 and server.requests == []


def test_a_name_resolving_to_loopback_is_judged_at_connect_time(serve: Any, sender: Any) -> None:
    """The name is looked up by the guard only (``loopback.test`` exists nowhere else), and the
    address it vetted is the one connected."""
    server = serve()
    url = f"http://loopback.test:{server.server_address[1]}/"
    with pytest.raises(SendError) as caught:
        sender(url, allow_private=False, resolver=to_loopback).post(b"{}", {})
    assert caught.value.reason == "refused" and server.connections == 0
    response = sender(url, allow_private=True, resolver=to_loopback).post(b"{}", {})
    assert response.status == 200 and server.requests[0][1]["Host"] == f"loopback.test:{server.server_address[1]}"


def test_a_keep_alive_connection_closed_while_idle_is_replaced_and_vetted_again(serve: Any, sender: Any) -> None:
    server = serve(idle=1.0)  # seconds a connection may idle on the server (and the first request take to arrive)
    lookups: list[str] = []
    client = sender(
        f"http://dest.test:{server.server_address[1]}/",
        resolver=counting(lookups),
    )
    assert client.post(b"1", {}).status == 200
    wait_until(lambda: server.closed == 1)  # the server dropped the idle connection
    assert client.post(b"2", {}).status == 200
    assert server.connections == 2 and [body for _, _, body in server.requests] == [b"1", b"2"]
    assert lookups == ["dest.test", "dest.test"]  # each new connection goes through the guard


def hang_up(handler: Handler, index: int) -> None:
    handler.close_connection = True  # no answer at all


def test_a_fresh_connection_closed_without_an_answer_is_not_retried(serve: Any, sender: Any) -> None:
    server = serve(hang_up)
    with pytest.raises(SendError) as caught:
        sender(server.url).post(b"{}", {})
    assert caught.value.reason == "connect"
    assert server.connections == 1 and len(server.requests) == 1


def test_a_reused_connection_lost_before_the_answer_is_retried_once(serve: Any, sender: Any) -> None:
    server = serve(lambda handler, index: ok(handler, index) if index == 0 else hang_up(handler, index))
    client = sender(server.url)
    assert client.post(b"1", {}).status == 200
    with pytest.raises(SendError) as caught:  # hung up on the reused connection, then on the fresh one
        client.post(b"2", {})
    assert caught.value.reason == "connect"
    assert server.connections == 2 and [body for _, _, body in server.requests] == [b"1", b"2", b"2"]


def test_a_bad_header_value_is_not_repeated_and_the_sender_recovers(serve: Any, sender: Any) -> None:
    server = serve()
    client = sender(server.url)
    with pytest.raises(SendError) as caught:
        client.post(b"{}", {"Authorization": "Bearer s3cret\r\nX-Injected: 1"})
    assert caught.value.reason == "protocol" and "s3cret" not in str(caught.value)
    assert server.requests == []
    assert client.post(b"{}", {"Authorization": "Bearer fine"}).status == 200


def test_twenty_threads_post_concurrently_on_one_sender(serve: Any, sender: Any) -> None:
    server = serve()
    client = sender(server.url)
    start = threading.Barrier(20)
    statuses: list[int] = []
    failures: list[BaseException] = []

    def work(n: int) -> None:
        try:
            start.wait(30)
            for i in range(5):
                statuses.append(client.post(b"%d-%d" % (n, i), {}).status)
        except BaseException as exc:  # reported by the assertion below
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failures == [] and statuses == [200] * 100
    assert sorted(body for _, _, body in server.requests) == sorted(
        b"%d-%d" % (n, i) for n in range(20) for i in range(5)
    )
    assert server.connections <= 20  # one per thread, each reused


@pytest.fixture
def tls(tmp_path: Path) -> tuple[ssl.SSLContext, Path]:
    """A server context for ``hooks.test`` (self-signed) and the certificate's file, to trust it."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hooks.test")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(hours=1))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("hooks.test")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    return context, cert_file


def test_https_verifies_the_url_host_on_the_vetted_address(serve: Any, sender: Any, tls: Any, monkeypatch: Any) -> None:
    context, cert_file = tls
    monkeypatch.setattr(certifi, "where", lambda: str(cert_file))  # the client's trust roots: this one certificate
    server = serve(tls=context)
    client = sender(f"https://hooks.test:{server.server_address[1]}/in", resolver=to_loopback)
    assert [client.post(b"%d" % i, {}).body for i in range(3)] == [b"hello"] * 3
    assert server.connections == 1 and server.requests[0][1]["Host"] == f"hooks.test:{server.server_address[1]}"


def test_https_to_an_untrusted_or_misnamed_certificate_is_a_tls_error(
    serve: Any, sender: Any, tls: Any, monkeypatch: Any
) -> None:
    context, cert_file = tls
    server = serve(tls=context)
    with pytest.raises(SendError) as caught:  # the trust roots do not hold the self-signed certificate
        sender(f"https://hooks.test:{server.server_address[1]}/", resolver=to_loopback).post(b"{}", {})
    assert caught.value.reason == "tls"
    monkeypatch.setattr(certifi, "where", lambda: str(cert_file))
    with pytest.raises(SendError) as caught:  # trusted, but for another name
        sender(f"https://other.test:{server.server_address[1]}/", resolver=to_loopback).post(b"{}", {})
    assert caught.value.reason == "tls" and "other.test" in str(caught.value)
    assert server.requests == []
