"""The readers behind the event stream (``webhooks.admin.stream``, docs/listen.md): one ``Hub`` per
runtime and process polls the database for new events while anyone listens, reads each new row
once and hands it to every ``Listener`` whose globs it matches.

Cost. While no stream is open nothing runs. While streams are open, idle or not, the hub makes one
poll a second (``IDLE_POLL``) however many there are, and is woken by an event this process stored
(``webhooks.store.arrivals``; at most one poll per ``MIN_GAP`` however often); after a poll that
found events it polls every ``BUSY_POLL`` for ``BUSY_FOR`` seconds, so a steady flow stored by
other processes arrives within that. On SQLite a poll reads the rows after the newest rowid seen
(writers take turns: rowids grow in commit order). On PostgreSQL it reads the keys of the rows
received in the last ``OVERLAP`` (an insert may commit a moment after the time it carries, and web
processes' clocks differ a little) and only the rows it has not seen whole. Each row is read whole
once, for every listener, and encoded once (``Frame``). A listener that resumes reads its own backlog once, then follows
the hub; the keys it sent keep it from sending one twice.

A listener more than ``QUEUE_MAX`` events behind is ended (``behind``): its client resumes from its
cursor and reads the backlog from the database at its own pace, holding no memory here.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import and_, func, literal_column, select, tuple_
from sqlalchemy.orm import Session

from webhooks.providers import PROVIDERS
from webhooks.store import arrivals
from webhooks.tables.events import Body, Event
from webhooks.timestamps import aware

if TYPE_CHECKING:
    from webhooks.runtime import Runtime

Key = tuple[str, str]
ROWID: Any = literal_column("events.rowid")  # SQLite's own row number of ``events``
OVERLAP = timedelta(seconds=2)
IDLE_POLL = 1.0  # seconds between polls while streams are open and nothing arrives
BUSY_POLL = 0.2  # ... while events arrive
BUSY_FOR = 3.0  # seconds a found event keeps the hub polling at BUSY_POLL
MIN_GAP = 0.1  # seconds between two polls however often this process's arrivals wake the hub
PAGE = 500  # rows a read
QUEUE_MAX = 10_000  # events a listener may be behind before it is ended (its client resumes)
STOPPING = threading.Event()  # the process is stopping (SIGTERM): every stream ends at once


class Frame(NamedTuple):
    """One event as the stream sends it: its Server-Sent Events frame, encoded once for every
    listener, and what listeners choose and order by."""

    endpoint: str
    event_id: str
    type: str
    cursor: str
    at: datetime  # received_at
    data: bytes


ALL = ("*",)


@dataclass(frozen=True)
class Wanted:
    """What a listener asked for: endpoint and event-type globs (``*``: all)."""

    endpoints: tuple[str, ...] = ("*",)
    types: tuple[str, ...] = ("*",)

    def matches(self, endpoint: str, event_type: str) -> bool:
        return (self.endpoints == ALL or any(fnmatchcase(endpoint, g) for g in self.endpoints)) and (
            self.types == ALL or any(fnmatchcase(event_type, g) for g in self.types)
        )


@dataclass(eq=False)  # by identity: held in sets
class Listener:
    wanted: Wanted
    ready: threading.Event = field(default_factory=threading.Event)
    pending: deque[Frame] = field(default_factory=deque)
    sent: set[Key] = field(default_factory=set)  # keys sent lately (forgotten as time moves on)
    order: deque[tuple[datetime, Key]] = field(default_factory=deque)  # ``sent``, oldest first
    behind: bool = False

    def offer(self, messages: Iterable[Frame]) -> None:
        for message in messages:
            if self.wanted.matches(message.endpoint, message.type):
                if len(self.pending) >= QUEUE_MAX:
                    self.behind = True
                    break
                self.pending.append(message)
        self.ready.set()

    def fresh(self, messages: Iterable[Frame]) -> list[Frame]:
        """Those of ``messages`` not sent yet, marked sent; a key is forgotten once events received
        ``2 × OVERLAP`` after it were sent (amortized O(1) a message: a busy stream sends thousands)."""
        out = []
        for message in messages:
            key = (message.endpoint, message.event_id)
            if key in self.sent:
                continue
            self.sent.add(key)
            self.order.append((message.at, key))
            out.append(message)
        if out:
            horizon = out[-1].at - 2 * OVERLAP
            while self.order and self.order[0][0] < horizon:
                self.sent.discard(self.order.popleft()[1])
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
        self._seen: set[Key] = set()  # PostgreSQL: the keys of the last ``2 × OVERLAP``
        self._order: deque[tuple[datetime, Key]] = deque()  # ``_seen``, oldest first
        self._rowid = 0  # SQLite: the newest rowid seen (one writer at a time: rowids grow in commit order)
        self.sqlite = self.engine.dialect.name == "sqlite"

    def attach(self, listener: Listener) -> None:
        with self.lock:
            self.listeners.add(listener)
            if self._thread is None or not self._thread.is_alive():
                self._high, self._seen, self._order = datetime.now(UTC), set(), deque()
                if self.sqlite:  # from the newest row now: the stream's live part begins here
                    with self.engine.connect() as conn:
                        self._rowid = int(
                            conn.execute(select(func.coalesce(func.max(ROWID), 0)).select_from(Event)).scalar_one()
                        )
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
            time.sleep(MIN_GAP)  # arrivals wake it per commit: at most one poll per MIN_GAP

    def poll(self) -> list[Frame]:
        """The rows received since the last poll that this hub has not seen and some listener
        wants, whole, oldest first."""
        assert self._high is not None
        rt = self._rt()
        if rt is None:
            return []
        with self.lock:
            wanted = {listener.wanted for listener in self.listeners}
        if self.sqlite:
            return self._after_rowid(rt, wanted)
        since = self._high - OVERLAP
        out: list[Frame] = []
        with Session(self.engine) as session:
            while True:
                self.polls += 1
                keys = session.execute(
                    select(Event.endpoint, Event.event_id, Event.event_type, Event.received_at)
                    .where(Event.received_at >= since)
                    .order_by(Event.received_at, Event.endpoint, Event.event_id)
                    .limit(PAGE)
                ).all()
                new = []
                for endpoint, event_id, event_type, at in keys:
                    key = (endpoint, event_id)
                    if key in self._seen:
                        continue
                    self._seen.add(key)
                    self._order.append((aware(at), key))
                    self._high = max(self._high, aware(at))
                    if any(w.matches(endpoint, event_type) for w in wanted):
                        new.append(key)
                out += read(session, rt, new)
                self.rows_read += len(new)
                if len(keys) < PAGE or aware(keys[-1][3]) <= since:
                    break
                since = aware(keys[-1][3])
        horizon = self._high - 2 * OVERLAP
        while self._order and self._order[0][0] < horizon:
            self._seen.discard(self._order.popleft()[1])
        return out

    def _after_rowid(self, rt: Runtime, wanted: set[Wanted]) -> list[Frame]:
        """SQLite: the rows after the newest rowid seen. Writers take turns there, and a row's
        rowid is given under the write lock, so rowids grow in commit order: no overlap to read."""
        out: list[Frame] = []
        with Session(self.engine) as session:
            while True:
                self.polls += 1
                keys = session.execute(
                    select(Event.endpoint, Event.event_id, Event.event_type, ROWID)
                    .where(self._rowid < ROWID)
                    .order_by(ROWID)
                    .limit(PAGE)
                ).all()
                if keys:
                    self._rowid = int(keys[-1][3])
                new = [(e, i) for e, i, t, _ in keys if any(w.matches(e, t) for w in wanted)]
                out += read(session, rt, new)
                self.rows_read += len(new)
                if len(keys) < PAGE:
                    return out


_hubs: weakref.WeakKeyDictionary[Any, Hub] = weakref.WeakKeyDictionary()
_hubs_lock = threading.Lock()


def hub(rt: Runtime) -> Hub:
    with _hubs_lock:
        found = _hubs.get(rt)
        if found is None:
            found = _hubs[rt] = Hub(rt)
        return found


def backlog(rt: Runtime, since: datetime, until: datetime, wanted: Wanted) -> Iterable[list[Frame]]:
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


COLUMNS = (  # what a frame says, as plain columns (no ORM entities: a poll reads many rows)
    Event.endpoint,
    Event.event_id,
    Event.kind,
    Event.event_type,
    Event.received_at,
    Event.signed_at,
    Event.object_type,
    Event.object_id,
    Event.object_version,
    Event.item_index,
    Event.payload,
    Event.headers,
    Body.body,
    Body.headers.label("body_headers"),
)


def read(session: Session, rt: Runtime, keys: list[Key]) -> list[Frame]:
    """The stream's frames of these events, in received order (with their delivery's body)."""
    if not keys:
        return []
    query = (
        select(*COLUMNS)
        .outerjoin(Body, and_(Body.endpoint == Event.endpoint, Body.digest == Event.body_digest))
        .where(tuple_(Event.endpoint, Event.event_id).in_(keys))
        .order_by(Event.received_at, Event.endpoint, Event.event_id)
    )
    endpoints = rt.settings.endpoints
    return [frame(row, endpoints.get(row.endpoint)) for row in session.execute(query)]


def frame(row: Any, endpoint: Any) -> Frame:
    at = aware(row.received_at)
    message = _message(row, at.isoformat(), endpoint)
    data = json.dumps(message, separators=(",", ":"))
    encoded = f"id: {message['cursor']}\nevent: event\ndata: {data}\n\n".encode()
    return Frame(row.endpoint, row.event_id, row.event_type, message["cursor"], at, encoded)


def _message(row: Any, received: str, endpoint: Any) -> dict[str, Any]:
    """One event as the stream sends it: the event's own bytes and the delivery as received (for
    an event of a batch, the whole batch and its headers; ``body`` null when it is the event's own
    bytes, as for every event that is not part of a batch), headers as stored."""
    kind = PROVIDERS.get(row.kind)
    return {
        "cursor": received,
        "endpoint": row.endpoint,
        "kind": row.kind,
        "event_id": row.event_id,
        "type": row.event_type,
        "received_at": received.replace("+00:00", "Z"),
        "signed_at": row.signed_at,
        "object": None
        if row.object_type is None
        else {"type": row.object_type, "id": row.object_id, "version": row.object_version},
        "item_index": row.item_index,
        "payload": base64.b64encode(row.payload).decode(),
        "delivery": {
            "body": None if row.body is None else base64.b64encode(row.body).decode(),
            "headers": dict(row.body_headers if row.body is not None else row.headers or {}),
        },
        "tolerance_seconds": getattr(endpoint, "tolerance_seconds", None),
        "signs_url": bool(kind is not None and kind.signs_url),  # a copy at another URL never verifies
    }
