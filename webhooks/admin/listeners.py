"""The readers behind the event stream (``webhooks.admin.stream``, docs/listen.md): one ``Hub`` per
runtime and process polls the database for new events while anyone listens, reads each new row
once and hands it to every ``Listener`` whose globs it matches.

Cost. While no stream is open nothing runs. While streams are open, idle or not, the hub makes one
poll a second (``IDLE_POLL``) however many there are, and is woken at once by an event this process
stored (``webhooks.store.arrivals``); after a poll that found events it polls every ``BUSY_POLL``
for ``BUSY_FOR`` seconds, so a steady flow stored by other processes arrives within that. A poll
reads the keys of the rows received in the last ``OVERLAP`` (an insert may commit a moment after
the time it carries, and web processes' clocks differ a little); only rows it has not seen are read
whole, once, for every listener. A listener that resumes reads its own backlog once, then follows
the hub; the keys it sent keep it from sending one twice.

A listener more than ``QUEUE_MAX`` events behind is ended (``behind``): its client resumes from its
cursor and reads the backlog from the database at its own pace, holding no memory here.
"""

from __future__ import annotations

import base64
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, select, tuple_
from sqlalchemy.orm import Session

from webhooks.store import arrivals
from webhooks.tables.events import Body, Event
from webhooks.timestamps import aware

if TYPE_CHECKING:
    from webhooks.runtime import Runtime

Key = tuple[str, str]
OVERLAP = timedelta(seconds=5)
IDLE_POLL = 1.0  # seconds between polls while streams are open and nothing arrives
BUSY_POLL = 0.2  # ... while events arrive
BUSY_FOR = 3.0  # seconds a found event keeps the hub polling at BUSY_POLL
PAGE = 500  # rows a read
QUEUE_MAX = 10_000  # events a listener may be behind before it is ended (its client resumes)
STOPPING = threading.Event()  # the process is stopping (SIGTERM): every stream ends at once


@dataclass(frozen=True)
class Wanted:
    """What a listener asked for: endpoint and event-type globs (``*``: all)."""

    endpoints: tuple[str, ...] = ("*",)
    types: tuple[str, ...] = ("*",)

    def matches(self, endpoint: str, event_type: str) -> bool:
        return any(fnmatchcase(endpoint, g) for g in self.endpoints) and any(
            fnmatchcase(event_type, g) for g in self.types
        )


@dataclass(eq=False)  # by identity: held in sets
class Listener:
    wanted: Wanted
    ready: threading.Event = field(default_factory=threading.Event)
    pending: deque[dict[str, Any]] = field(default_factory=deque)
    sent: dict[Key, datetime] = field(default_factory=dict)  # keys sent, by received_at (pruned)
    behind: bool = False

    def offer(self, messages: Iterable[dict[str, Any]]) -> None:
        for message in messages:
            if self.wanted.matches(message["endpoint"], message["type"]):
                if len(self.pending) >= QUEUE_MAX:
                    self.behind = True
                    break
                self.pending.append(message)
        self.ready.set()

    def fresh(self, messages: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """Those of ``messages`` not sent yet, marked sent; old keys are forgotten as time moves on."""
        out = []
        for message in messages:
            key, at = (message["endpoint"], message["event_id"]), _at(message["cursor"])
            if key in self.sent:
                continue
            self.sent[key] = at
            out.append(message)
        if len(self.sent) > 2 * PAGE and out:
            horizon = _at(out[-1]["cursor"]) - 2 * OVERLAP
            self.sent = {k: v for k, v in self.sent.items() if v >= horizon}
        return out


class Hub:
    """This process's reader for one runtime's database (``hub(rt)``)."""

    def __init__(self, rt: Runtime) -> None:
        self._rt = weakref.ref(rt)
        self.engine = rt.engine
        self.listeners: set[Listener] = set()
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.polls = 0  # reads of new keys (what idle listeners cost: tests and docs count it)
        self.rows_read = 0  # whole rows read
        self._thread: threading.Thread | None = None
        self._high: datetime | None = None  # the newest received_at seen
        self._seen: dict[Key, datetime] = {}

    def attach(self, listener: Listener) -> None:
        with self.lock:
            self.listeners.add(listener)
            if self._thread is None or not self._thread.is_alive():
                self._high, self._seen = datetime.now(UTC), {}
                arrivals.follow(self.wake)
                self._thread = threading.Thread(target=self._run, name="webhooks-stream-hub", daemon=True)
                self._thread.start()

    def detach(self, listener: Listener) -> None:
        with self.lock:
            self.listeners.discard(listener)
        self.wake.set()

    def _run(self) -> None:
        busy_until = 0.0
        while not STOPPING.is_set():
            with self.lock:
                if not self.listeners:
                    self._thread = None
                    arrivals.unfollow(self.wake)
                    return
                listeners = list(self.listeners)
            try:
                found = self.poll()
            except Exception:  # the database went away: the next poll tries again
                found = []
            if found:
                busy_until = time.monotonic() + BUSY_FOR
                for listener in listeners:
                    listener.offer(found)
            self.wake.wait(BUSY_POLL if time.monotonic() < busy_until else IDLE_POLL)
            self.wake.clear()

    def poll(self) -> list[dict[str, Any]]:
        """The rows received since the last poll that this hub has not seen, whole, oldest first."""
        assert self._high is not None
        rt = self._rt()
        if rt is None:
            return []
        since = self._high - OVERLAP
        out: list[dict[str, Any]] = []
        with Session(self.engine) as session:
            while True:
                self.polls += 1
                keys = session.execute(
                    select(Event.endpoint, Event.event_id, Event.received_at)
                    .where(Event.received_at >= since)
                    .order_by(Event.received_at, Event.endpoint, Event.event_id)
                    .limit(PAGE)
                ).all()
                new = [(e, i) for e, i, _ in keys if (e, i) not in self._seen]
                for endpoint, event_id, at in keys:
                    self._seen[(endpoint, event_id)] = aware(at)
                    self._high = max(self._high, aware(at))
                out += read(session, rt, new)
                self.rows_read += len(new)
                if len(keys) < PAGE or aware(keys[-1][2]) <= since:
                    break
                since = aware(keys[-1][2])
        horizon = self._high - 2 * OVERLAP
        if len(self._seen) > PAGE:
            self._seen = {k: v for k, v in self._seen.items() if v >= horizon}
        return out


_hubs: weakref.WeakKeyDictionary[Any, Hub] = weakref.WeakKeyDictionary()
_hubs_lock = threading.Lock()


def hub(rt: Runtime) -> Hub:
    with _hubs_lock:
        found = _hubs.get(rt)
        if found is None:
            found = _hubs[rt] = Hub(rt)
        return found


def backlog(rt: Runtime, since: datetime, until: datetime, wanted: Wanted) -> Iterable[list[dict[str, Any]]]:
    """A resuming listener's own read: the rows received in [since, until], page by page."""
    after: tuple[datetime, str, str] | None = None
    while True:
        with Session(rt.engine) as session:
            query = select(Event.endpoint, Event.event_id, Event.received_at, Event.event_type).where(
                Event.received_at >= since, Event.received_at <= until
            )
            if after is not None:
                query = query.where(tuple_(Event.received_at, Event.endpoint, Event.event_id) > after)
            keys = session.execute(query.order_by(Event.received_at, Event.endpoint, Event.event_id).limit(PAGE)).all()
            if not keys:
                return
            after = (aware(keys[-1][2]), keys[-1][0], keys[-1][1])
            page = read(session, rt, [(e, i) for e, i, _, t in keys if wanted.matches(e, t)])
        yield page  # outside the session: no read transaction stays open while the client reads
        if len(keys) < PAGE:
            return


def read(session: Session, rt: Runtime, keys: list[Key]) -> list[dict[str, Any]]:
    """The stream's messages of these events, in received order (with their delivery's body)."""
    if not keys:
        return []
    query = (
        select(Event, Body.body, Body.headers)
        .outerjoin(Body, and_(Body.endpoint == Event.endpoint, Body.digest == Event.body_digest))
        .where(tuple_(Event.endpoint, Event.event_id).in_(keys))
        .order_by(Event.received_at, Event.endpoint, Event.event_id)
    )
    endpoints = rt.settings.endpoints
    return [message(e, body, headers, endpoints.get(e.endpoint)) for e, body, headers in session.execute(query)]


def message(event: Event, body: bytes | None, headers: dict[str, str] | None, endpoint: Any) -> dict[str, Any]:
    """One event as the stream sends it: the event's own bytes and the delivery as received
    (for an event of a batch, the whole batch and its headers), headers as stored."""
    delivery_body = body if body is not None else event.payload
    return {
        "cursor": aware(event.received_at).isoformat(),
        "endpoint": event.endpoint,
        "kind": event.kind,
        "event_id": event.event_id,
        "type": event.event_type,
        "received_at": aware(event.received_at).isoformat().replace("+00:00", "Z"),
        "signed_at": event.signed_at,
        "object": None
        if event.object_type is None
        else {"type": event.object_type, "id": event.object_id, "version": event.object_version},
        "item_index": event.item_index,
        "payload": base64.b64encode(event.payload).decode(),
        "delivery": {
            "body": base64.b64encode(delivery_body).decode(),
            "headers": dict(headers if headers is not None else event.headers or {}),
        },
        "tolerance_seconds": getattr(endpoint, "tolerance_seconds", None),
    }


def _at(cursor: str) -> datetime:
    return datetime.fromisoformat(cursor)
