"""``GET /admin/api/stream``: the stored, verified events as Server-Sent Events, to a token (a
read-only one suffices) or the admin password; what ``webhooks listen`` reads (docs/listen.md).

Query: ``endpoint`` and ``type`` (globs, comma-separated, ``*`` by default); where to begin: the
``Last-Event-ID`` header or ``cursor`` (an event's ``id:``, resuming after a lost connection), else
``since`` (``10m``, at most 30 days, or an ISO time), else now. Each event is one ``event: event``
frame whose ``id:`` is its cursor and whose ``data:`` is ``listeners.message``'s JSON; a comment
every ``KEEPALIVE`` seconds keeps proxies from closing an idle stream and tells a stream that its
client went away. A process serves at most ``WEBHOOKS_LISTENERS_MAX`` streams at once (8), never more
than half its ``WEB_THREADS`` (beyond, 429 ``too_many_listeners``): the threads stay for deliveries.
Each stream is audited in ``listeners`` (``GET /admin/api/listeners``). SIGTERM ends every stream
at once (``close_all``): the client resumes from its cursor on another process.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from flask import Blueprint, current_app, jsonify, request
from sqlalchemy import select, update
from werkzeug.wrappers import Response

from webhooks.admin import listeners as hubs
from webhooks.admin.auth import client, runtime, who
from webhooks.admin.queries import FilterError, iso
from webhooks.configuration import settings as config
from webhooks.errors import ConfigError
from webhooks.providers.base import duration_seconds
from webhooks.tables.listeners import Listener as Audit

KEEPALIVE = 10.0  # seconds between comments on an idle stream
MAX_SINCE = timedelta(days=30)
MAX_GLOBS, MAX_GLOB = 20, 200
LISTENERS_MAX = (8, 64)  # WEBHOOKS_LISTENERS_MAX: default, bound
TOO_MANY = "too_many_listeners"
_open: weakref.WeakSet[hubs.Listener] = weakref.WeakSet()
_lock = threading.Lock()


def init_app(api: Blueprint) -> None:
    api.add_url_rule("/stream", view_func=stream, methods=["GET"])
    api.add_url_rule("/listeners", view_func=list_listeners, methods=["GET"])


def listeners_max() -> int:
    """``WEBHOOKS_LISTENERS_MAX``: the streams a web process serves at once (0: none), checked at start."""
    raw = config.variable("WEBHOOKS_LISTENERS_MAX") or str(LISTENERS_MAX[0])
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if not 0 <= value <= LISTENERS_MAX[1]:
        raise ConfigError(f"WEBHOOKS_LISTENERS_MAX must be a whole number from 0 to {LISTENERS_MAX[1]}, not {raw!r}")
    threads = config.variable("WEB_THREADS") or "256"  # each stream holds one of the web process's threads
    return min(value, int(threads) // 2) if threads.isdigit() else value


def close_all() -> None:
    """The process is stopping: every stream ends now (its client resumes from its cursor)."""
    hubs.STOPPING.set()
    for listener in list(_open):
        listener.ready.set()


def globs(name: str) -> tuple[str, ...]:
    values = [g.strip() for raw in request.args.getlist(name) for g in raw.split(",") if g.strip()]
    if len(values) > MAX_GLOBS or any(len(g) > MAX_GLOB for g in values):
        raise FilterError(f"bad_{name}")
    return tuple(values) or ("*",)


def begin(now: datetime) -> tuple[datetime | None, str | None]:
    """Where the stream begins (None: now, live only) and what the audit records of it."""
    cursor = request.headers.get("Last-Event-ID") or request.args.get("cursor")
    if cursor:
        try:
            at = datetime.fromisoformat(cursor)
        except ValueError as exc:
            raise FilterError("bad_cursor") from exc
        if at.tzinfo is None or not now - MAX_SINCE <= at <= now + hubs.OVERLAP:
            raise FilterError("bad_cursor")
        return at - hubs.OVERLAP, cursor[:64]
    since = request.args.get("since")
    if not since:
        return None, None
    try:
        at = now - timedelta(seconds=duration_seconds(since))
    except ValueError:
        try:
            at = datetime.fromisoformat(since.replace("Z", "+00:00"))
        except ValueError as exc:
            raise FilterError("bad_since") from exc
    if at.tzinfo is None or not now - MAX_SINCE <= at <= now:
        raise FilterError("bad_since")
    return at, since[:64]


def stream() -> Any:
    rt = runtime()
    now = datetime.now(UTC)
    wanted = hubs.Wanted(globs("endpoint"), globs("type"))
    start, resumed_from = begin(now)
    limit: int = current_app.extensions["webhooks_listeners_max"]
    listener = hubs.Listener(wanted)
    with _lock:
        if hubs.STOPPING.is_set() or len(_open) >= limit:
            answer = jsonify(error=TOO_MANY, detail=f"this process serves {limit} streams at once; try again shortly")
            answer.status_code, answer.headers["Retry-After"] = 429, "5"
            return answer
        _open.add(listener)
    try:
        with rt.sessions() as session, session.begin():
            audit = Audit(
                who=who(),
                address=client()[:64],
                endpoints=",".join(wanted.endpoints),
                types=",".join(wanted.types),
                resumed_from=resumed_from,
                started_at=now,
                sent=0,
            )
            session.add(audit)
            session.flush()
            audit_id = audit.id
    except BaseException:
        _open.discard(listener)
        raise
    hub = hubs.hub(rt)
    hub.attach(listener)  # before the backlog is read: nothing falls between the two

    def events() -> Iterator[bytes]:
        sent, why = 0, "closed"
        try:
            yield b"retry: 1000\n: open\n\n"
            if start is not None:
                for page in hubs.backlog(rt, start, datetime.now(UTC) + hubs.OVERLAP, wanted):
                    fresh = listener.fresh(page)
                    sent += len(fresh)
                    yield b"".join(m.data for m in fresh)  # one write a page, not one a frame
                    if hubs.STOPPING.is_set():
                        break
            beat = time.monotonic()
            while not hubs.STOPPING.is_set():
                if listener.behind:
                    why = "behind"
                    yield b"event: behind\ndata: {}\n\n"
                    return
                listener.ready.wait(0.5)
                listener.ready.clear()
                taken = [listener.pending.popleft() for _ in range(len(listener.pending))]
                fresh = listener.fresh(taken)
                if fresh:  # what arrived since the last wake-up, in one write
                    sent += len(fresh)
                    yield b"".join(m.data for m in fresh)
                if time.monotonic() - beat >= KEEPALIVE:
                    beat = time.monotonic()
                    yield b": keepalive\n\n"
            why = "stopping"
        finally:
            hub.detach(listener)
            _open.discard(listener)
            ended(rt, audit_id, sent, why)

    return Response(
        events(),
        mimetype="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        direct_passthrough=True,
    )


def ended(rt: Any, audit_id: int, sent: int, why: str) -> None:
    try:
        with rt.sessions() as session, session.begin():
            session.execute(
                update(Audit)
                .where(Audit.id == audit_id)
                .values(ended_at=datetime.now(UTC), sent=sent, ended_because=why)
            )
    except Exception:  # the database is gone: the row stays open, as for a process that died
        pass


def list_listeners() -> Any:
    """The streams opened, newest first (at most 100): who, from where, for what, how they ended."""
    with runtime().sessions() as session:
        found = session.scalars(select(Audit).order_by(Audit.id.desc()).limit(100))
        return jsonify(
            listeners=[
                {
                    "id": a.id,
                    "who": a.who,
                    "address": a.address,
                    "endpoints": a.endpoints.split(","),
                    "types": a.types.split(","),
                    "resumed_from": a.resumed_from,
                    "started_at": iso(a.started_at),
                    "ended_at": iso(a.ended_at),
                    "sent": a.sent,
                    "ended_because": a.ended_because,
                }
                for a in found
            ]
        )
