"""``webhooks listen RECEIVER_URL --token T --forward-to URL``: a deployed receiver's verified events,
streamed (``GET /admin/api/stream``) and posted one at a time, in the order stored, to a local URL
(docs/listen.md).

``--headers original`` posts each delivery's own bytes with its own headers (the handler's real
verification runs); ``--headers standard`` posts each event's own bytes signed with Standard
Webhooks under a local secret kept in the state file and printed at start. The state file holds the
cursor and the keys lately posted: a restart, or a reconnection after a lost stream, resumes after
the last event posted and never posts one twice (a repeat the state cannot rule out keeps its
``webhook-id``). Standard library only, like ``webhooks send``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import signal
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from webhooks import outbound
from webhooks.providers.base import duration_seconds

READ_TIMEOUT = 30.0  # seconds without a byte (the receiver comments every 10 s): the stream is lost
RECONNECT = (0.5, 1, 2, 4, 8, 15)  # seconds between attempts to reconnect, the last repeated
RETRIES = (0.5, 1, 2, 4, 8)  # seconds before each retry of a local failure (no answer, 5xx, 429)
RECENT = 5000  # keys the state remembers
HOP = {"host", "content-length", "connection", "transfer-encoding", "keep-alive", "accept-encoding", "te"}
NOT_KEPT = ("[redacted]", "[verified signature]")  # header values the receiver stores instead


@dataclass
class State:
    """What a restart resumes from (``--state``, JSON)."""

    path: Path
    cursor: str | None = None
    recent: list[list[str]] = field(default_factory=list)
    secret: str = ""

    @classmethod
    def load(cls, path: Path) -> State:
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            data = {}
        except (OSError, ValueError) as exc:
            raise click.ClickException(f"state file {path}: {exc} (remove it to start afresh)") from None
        secret = data.get("secret") or "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
        return cls(path, data.get("cursor"), list(data.get("recent") or []), secret)

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".tmp")
        data = {"cursor": self.cursor, "recent": self.recent[-RECENT:], "secret": self.secret}
        temporary.write_text(json.dumps(data))
        os.replace(temporary, self.path)

    def posted(self, message: dict[str, Any]) -> None:
        self.cursor = message["cursor"]
        self.recent.append([message["endpoint"], message["event_id"]])
        del self.recent[:-RECENT]
        self.save()


def default_state(receiver: str, forward_to: str) -> Path:
    digest = hashlib.sha256(f"{receiver}\0{forward_to}".encode()).hexdigest()[:16]
    return Path.home() / ".local" / "state" / "webhooks" / f"listen-{digest}.json"


@dataclass
class Tally:
    started: float = field(default_factory=time.monotonic)
    posted: int = 0
    failed: int = 0
    warned: set[str] = field(default_factory=set)

    def summary(self) -> str:
        took = int(time.monotonic() - self.started)
        return f"posted {self.posted} events, {self.failed} failed, in {took // 60}m{took % 60:02d}s"


class Forwarder:
    """Posts each message to the local URL as ``--headers`` says, with retries; prints one line each."""

    def __init__(self, forward_to: str, mode: str, state: State, tally: Tally) -> None:
        self.forward_to, self.mode, self.state, self.tally = forward_to, mode, state, tally
        self.keys = {(e, i) for e, i in state.recent}
        self.batches: set[str] = set()  # delivery bodies posted (original mode: a batch's once)
        self.stopping = False  # Ctrl-C came while an event was being posted (``finishing``)

    def handle(self, message: dict[str, Any]) -> None:
        key = (message["endpoint"], message["event_id"])
        if key in self.keys:
            return  # posted before a restart or a reconnection: never twice
        with finishing(self):
            self.post_one(key, message)

    def post_one(self, key: tuple[str, str], message: dict[str, Any]) -> None:
        request = self.request(message)
        if request is None:
            self.line(message, "part of a delivery posted already", 0.0)
        else:
            status, took = self.post(*request)
            self.line(message, str(status) if status else "no answer", took)
            if status is not None and 200 <= status < 300:
                self.tally.posted += 1
            else:
                self.tally.failed += 1
        self.keys.add(key)
        self.state.posted(message)

    def request(self, message: dict[str, Any]) -> tuple[bytes, dict[str, str]] | None:
        if self.mode == "standard":
            return self.standard(message)
        body = base64.b64decode(message["delivery"]["body"] or message["payload"])
        if message.get("item_index") is not None:
            digest = hashlib.sha256(body).hexdigest()
            if digest in self.batches:
                return None
            self.batches.add(digest)
        headers = {k: v for k, v in message["delivery"]["headers"].items() if k.lower() not in HOP}
        self.warn_original(message, headers)
        return body, headers

    def standard(self, message: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
        from webhooks.forward import signing

        body = base64.b64decode(message["payload"])
        stored = {k.lower(): v for k, v in message["delivery"]["headers"].items()}
        obj = message.get("object") or {}
        sent = signing.Message(
            message_id=signing.message_id(message["endpoint"], message["event_id"], "listen"),
            endpoint=message["endpoint"],
            event_id=message["event_id"],
            event_type=message["type"],
            object_type=obj.get("type"),
            object_id=obj.get("id"),
            object_version=obj.get("version"),
            content_type=stored.get("content-type", "application/json"),
        )
        key = base64.b64decode(self.state.secret.removeprefix("whsec_"))
        return body, signing.headers([key], sent, int(time.time()), body)

    def warn_original(self, message: dict[str, Any], headers: dict[str, str]) -> None:
        kind = message["kind"]
        if message.get("signs_url") and kind not in self.tally.warned:
            self.tally.warned.add(kind)
            self.warn(f"{kind} signs the URL it calls: its check fails at {self.forward_to}; use --headers standard")
        held = sorted(k for k, v in headers.items() if v in NOT_KEPT)
        if held and f"held:{kind}" not in self.tally.warned:
            self.tally.warned.add(f"held:{kind}")
            self.warn(
                f"{kind}: the receiver keeps no {', '.join(held)} (stored as {headers[held[0]]}): "
                "your handler's check cannot pass; use --headers standard"
            )
        tolerance, signed = message.get("tolerance_seconds"), message.get("signed_at")
        if tolerance and signed and time.time() - signed > tolerance:
            age = int(time.time() - signed)
            self.warn(
                f"{message['event_id']} was signed {age // 60}m{age % 60:02d}s ago, past {kind}'s {tolerance} s "
                "tolerance: your handler's check may refuse it (use --headers standard for old events)"
            )

    def post(self, body: bytes, headers: dict[str, str]) -> tuple[int | None, float]:
        status: int | None = None
        started = time.monotonic()
        for wait in (*RETRIES, None):
            started = time.monotonic()
            try:
                status = outbound.call(self.forward_to, method="POST", data=body, headers=headers, timeout=30).status
            except outbound.Unreachable:
                status = None
            if (status is not None and status < 500 and status != 429) or wait is None or self.stopping:
                break
            time.sleep(wait)
        return status, time.monotonic() - started

    def line(self, message: dict[str, Any], answer: str, took: float) -> None:
        at = message["received_at"].replace("T", " ")[:19]
        click.echo(
            f"{at}  {message['endpoint']}  {message['type']}  {message['event_id']}  -> {answer} ({took * 1000:.0f} ms)"
        )

    def warn(self, text: str) -> None:
        click.echo(f"warning: {text}", err=True)


@contextmanager
def finishing(forwarder: Forwarder) -> Iterator[None]:
    """Ctrl-C or SIGTERM while an event is posted: that post ends (no further retry) and is counted
    and kept in the state, then the stop. Interrupted mid-post, the local handler had the event while
    the summary and the state did not: the next run posted it again. A second Ctrl-C stops at once."""

    def hold(signum: int, frame: Any) -> None:
        if forwarder.stopping:
            raise KeyboardInterrupt
        forwarder.stopping = True

    previous = {signum: signal.signal(signum, hold) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if forwarder.stopping:
        raise KeyboardInterrupt


def events(url: str, token: str, cursor: str | None) -> Any:
    """One connection's events (parsed ``data:``), until it ends; raises ``OSError`` when it is lost."""
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
    if cursor:
        headers["Last-Event-ID"] = cursor
    request = urllib.request.Request(url, headers=headers)
    try:
        response = urllib.request.urlopen(request, timeout=READ_TIMEOUT)
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode("utf-8", "replace")
        if exc.code in (401, 403, 404):
            raise click.ClickException(f"the receiver refused the stream: {exc.code} {detail}") from None
        raise OSError(f"{exc.code} {detail}") from None
    with response:
        data: list[str] = []
        kind = "message"
        while True:
            raw = response.readline()
            if not raw:
                return  # the receiver ended the stream (it is stopping): reconnect
            line = raw.decode("utf-8").rstrip("\r\n")
            if not line:
                if data and kind == "event":
                    yield json.loads("\n".join(data))
                data, kind = [], "message"
            elif line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
            elif line.startswith("event:"):
                kind = line[6:].strip()


def stream_url(receiver: str, endpoints: tuple[str, ...], types: tuple[str, ...], since: str | None) -> str:
    query = [("endpoint", e) for e in endpoints] + [("type", t) for t in types] + ([("since", since)] if since else [])
    tail = f"?{urllib.parse.urlencode(query)}" if query else ""
    return receiver.rstrip("/") + "/admin/api/stream" + tail


@click.command()
@click.argument("receiver_url")
@click.option("--token", required=True, help="An admin API token of the receiver (a read-only one suffices).")
@click.option("--forward-to", required=True, help="The local URL to post each event to.")
@click.option(
    "--headers",
    "mode",
    type=click.Choice(["original", "standard"]),
    default="original",
    show_default=True,
    help="original: the provider's own headers and bytes; standard: Standard Webhooks, signed with a local secret.",
)
@click.option("--endpoint", "endpoints", multiple=True, help="Only this endpoint (a glob; repeatable).")
@click.option("--type", "types", multiple=True, help="Only this event type (a glob; repeatable).")
@click.option("--since", default=None, help="Replay events received this long ago (10m, 2h) before following.")
@click.option("--state", type=click.Path(dir_okay=False, path_type=Path), default=None, help="The resume file.")
def listen(
    receiver_url: str,
    token: str,
    forward_to: str,
    mode: str,
    endpoints: tuple[str, ...],
    types: tuple[str, ...],
    since: str | None,
    state: Path | None,
) -> None:
    """Stream RECEIVER_URL's verified events and post each to --forward-to, in the order stored."""
    if urllib.parse.urlsplit(forward_to).scheme not in ("http", "https"):
        raise click.BadParameter("an http:// or https:// URL", param_hint="--forward-to")
    if since is not None:
        try:
            duration_seconds(since)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--since") from None
    kept = State.load(state or default_state(receiver_url, forward_to))
    if since is not None:
        kept.cursor = None  # --since replays from there; the keys still keep a repeat from posting
    kept.save()  # the local secret printed below stays the same for every later run
    tally = Tally()
    forwarder = Forwarder(forward_to, mode, kept, tally)
    click.echo(f"listening to {receiver_url} -> {forward_to} (--headers {mode}); Ctrl-C stops")
    if mode == "standard":
        click.echo(f"your handler's Standard Webhooks secret: {kept.secret} (kept in {kept.path})")
    waits = iter(RECONNECT)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a stop by kill ends like Ctrl-C: the summary
    try:
        while True:
            url = stream_url(receiver_url, endpoints, types, since if kept.cursor is None else None)
            try:
                for message in events(url, token, kept.cursor):
                    waits = iter(RECONNECT)
                    forwarder.handle(message)
            except (OSError, ValueError) as exc:
                click.echo(f"lost the stream ({exc.__class__.__name__}: {str(exc)[:120]}); reconnecting", err=True)
            wait = next(waits, RECONNECT[-1])
            time.sleep(wait)
    except KeyboardInterrupt:
        when = datetime.now(UTC).strftime("%H:%M:%S")
        click.echo(f"\n{when} stopped: {tally.summary()}; the same command resumes after {kept.cursor or 'now'}")
