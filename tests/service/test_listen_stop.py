"""Ctrl-C while ``webhooks listen`` posts an event (the race a full run found): the post ends, the
event is counted and kept in the state, then the stop; the next run does not post it again."""

from __future__ import annotations

import base64
import os
import signal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support.servers import serve_in_thread
from webhooks.service.listen import Forwarder, State, Tally


def message(event_id: str) -> dict[str, Any]:
    return {
        "cursor": "2026-12-06T03:44:01.284241+00:00",
        "endpoint": "stripe",
        "kind": "stripe",
        "event_id": event_id,
        "type": "payment_intent.succeeded",
        "received_at": "2026-12-06T03:44:01.284241Z",
        "object": None,
        "payload": base64.b64encode(b'{"id": "%s"}' % event_id.encode()).decode(),
        "delivery": {"body": None, "headers": {"Content-Type": "application/json"}},
    }


@pytest.fixture
def interrupting_sink() -> Any:
    """A local handler that gets Ctrl-C sent to this process while it holds the post, then answers 200."""
    received: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            os.kill(os.getpid(), signal.SIGINT)  # the developer's Ctrl-C, mid-post
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    serve_in_thread(server)
    try:
        yield f"http://127.0.0.1:{server.server_port}/hooks", received
    finally:
        server.shutdown()
        server.server_close()


def test_ctrl_c_mid_post_counts_the_post_and_keeps_it_in_the_state(interrupting_sink: Any, tmp_path: Path) -> None:
    url, received = interrupting_sink
    state, tally = State.load(tmp_path / "state.json"), Tally()
    forwarder = Forwarder(url, "standard", state, tally)
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        forwarder.handle(message("evt_mid_post"))
    assert len(received) == 1
    assert (tally.posted, tally.failed) == (1, 0)  # interrupted mid-post it was 0: the summary said one less
    assert State.load(tmp_path / "state.json").recent == [["stripe", "evt_mid_post"]]
    assert signal.getsignal(signal.SIGINT) is before  # Ctrl-C stops at once again between posts

    again = Forwarder(url, "standard", State.load(tmp_path / "state.json"), Tally())
    again.handle(message("evt_mid_post"))  # a restart: kept in the state, not posted twice
    assert len(received) == 1
