"""Group commit: concurrent deliveries in one process share one INSERT, one COMMIT and one Redis
round trip for their jobs; each is answered once the transaction holding its rows has committed.

No thread of its own and no added wait: the first delivery to arrive while no batch is being
written writes the batch (every delivery waiting at that moment, itself included); those arriving
meanwhile wait for it to finish and form the next batch. One request at a time pays nothing.
The writer answers its batch-mates and hands the lead on as soon as the batch has committed, and
queues the batch's jobs after (before its own answer), while the next batch's INSERT is under way:
a committed event whose job is not queued yet is ``queued`` in the database, and the sweeper
queues it if this process dies first, as it would after any crash between commit and enqueue.

The committer keeps one connection for its batches (one batch is written at a time): no pool
check-out, pre-ping and reset per batch. A batch that fails drops it, so the next one connects
afresh (through the pool's pre-ping: a restarted database is followed). The storing is the store's
(``Store.inserts``; on PostgreSQL a batch is one statement that is its own transaction: one round
trip, one disk flush); so is the replayed-signature check, made after the commit on every database.

A batch that fails is not anyone's answer: each of its deliveries is stored again alone, so one
delivery's bad row (or a connection dropped mid-batch) costs its batch-mates a second try, never a
wrong answer. Nothing was committed by the failed transaction, so nothing acknowledged is lost.
"""

from __future__ import annotations

import logging
import threading
import weakref
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy.exc import SQLAlchemyError

from webhooks import tracing
from webhooks.providers.base import Endpoint, Verified
from webhooks.receiver import outbox
from webhooks.receiver.duplicates import Duplicates
from webhooks.runtime import Runtime
from webhooks.store import arrivals, bodies
from webhooks.store.recent import Recent

log = logging.getLogger("webhooks.batch")  # the name the docs and log filters know
MAX_DELIVERIES = 64  # per batch: bounds one statement's size and a batch's latency


@dataclass
class Pending:
    """One delivery waiting for its batch: filled in by whoever writes the batch."""

    endpoint: Endpoint
    verified: Verified
    rows: list[dict[str, object]]
    body: dict[str, object] | None = None  # its ``bodies`` row when its events are items of its body
    new: list[str] = field(default_factory=list)
    replayed: bool = False
    error: BaseException | None = None
    done: bool = False
    wake: threading.Event = field(default_factory=threading.Event)


class GroupCommit:
    """Stores deliveries for one runtime; ``store`` is called from many request threads."""

    def __init__(self, rt: Runtime, max_deliveries: int = MAX_DELIVERIES) -> None:
        self.rt = rt
        self.max_deliveries = max_deliveries
        self._lock = threading.Lock()
        self._pending: list[Pending] = []
        self._writing = False
        self._inserts = rt.store.inserts()  # used by the batch writer only (one at a time)
        self.duplicates = Duplicates(rt)
        self.recent = Recent()

    def known(self, endpoint: Endpoint, verified: Verified) -> bool:
        """Whether this verified delivery is a duplicate of events the database lately confirmed
        (``webhooks.store.recent``): if so it is counted, and nothing is asked of the database.

        Only for schemes without replay keys: a delivery with one that stores nothing may still
        be a replayed signature, which only the database can tell."""
        if verified.replay_key is not None:
            return False
        keys = {(endpoint.name, e.event_id) for e in verified.events}
        if not self.recent.holds(keys):
            return False
        self.duplicates.add(dict.fromkeys(keys, 1), inline=False)  # no database round trip here either
        return True

    def store(self, item: Pending) -> Pending:
        """Store ``item``'s rows (alone or with others') and queue the new ones' jobs; returns it
        done. Raises the ``SQLAlchemyError`` that kept its rows from being committed."""
        with self._lock:
            lead = not self._writing
            if lead:
                self._writing = True
            else:
                self._pending.append(item)
        if not lead:
            item.wake.wait()  # set when its batch is written, or when it is handed the lead
            if item.done:
                return _result(item)
        # The leader: write what waits (itself first), wake its batch-mates, hand the lead on.
        with self._lock:
            batch = [item, *self._pending[: self.max_deliveries - 1]]
            del self._pending[: self.max_deliveries - 1]
        stored = self._write(batch)
        for other in batch[1:]:
            other.wake.set()
        with self._lock:
            following = self._pending.pop(0) if self._pending else None
            if following is None:
                self._writing = False
        if following is not None:
            following.wake.set()  # not done: it leads the next batch
        # Committed, its batch-mates answered, the next batch under way: its jobs now, while the
        # next INSERT waits on the database (one Redis round trip overlaps one commit).
        with tracing.span("enqueue", deliveries=len(stored)):
            self._enqueue(stored)
        return _result(item)

    def _write(self, batch: list[Pending]) -> list[Pending]:
        """Commit ``batch``; each of its deliveries done. Returns those that stored events."""
        stored: list[Pending] = []
        try:
            self._commit(batch)
        except SQLAlchemyError as exc:
            self._drop_connection()
            if len(batch) > 1:
                # One delivery's bad row or a dropped connection: every one is stored alone, so
                # each gets the answer its own rows deserve.
                log.warning("batch of %d failed (%s); storing each alone", len(batch), exc.__class__.__name__)
                for item in batch:
                    stored += self._write([item])
                return stored
            batch[0].error = exc
        except BaseException as exc:  # a bug: each waiting delivery gets it, none waits forever
            self._drop_connection()
            for item in batch:
                item.error = exc
        else:
            stored = [item for item in batch if item.new]
            if stored:
                arrivals.arrived()  # an open event stream in this process reads them at once
            self.duplicates.add(_duplicates(batch))
            self.recent.add(_confirmed(batch))
        for item in batch:
            item.done = True
        return stored

    def _commit(self, batch: list[Pending]) -> None:
        rows = [row for item in batch for row in item.rows]
        _sort(batch, self._inserts.insert(rows, lambda created: _bodies(batch, created)))  # committed
        # Only a scheme with replay keys can have replayed a signature: checked after, rarely.
        again_signed = [item for item in batch if not item.new and item.verified.replay_key is not None]
        try:
            for item in again_signed:
                item.replayed = replayed(self.rt, item.endpoint, item.verified, datetime.now(UTC))
        except SQLAlchemyError as exc:  # the rows are committed: only the replay's count is lost
            log.warning("could not check replayed signatures (%s); answered as duplicates", exc.__class__.__name__)

    def _drop_connection(self) -> None:
        """Discard the batches' connection after a failure: the next batch connects afresh."""
        self._inserts.drop()

    def _enqueue(self, stored: list[Pending]) -> None:
        outbox.enqueue(self.rt, [(item.endpoint.name, event_id) for item in stored for event_id in item.new])


def known_body(rt: Runtime, endpoint: str, digest: str) -> bool:
    """Whether a multi-event delivery with this body is kept already (a replayed capture)."""
    with rt.engine.connect() as conn:
        return bodies.kept(conn, endpoint, digest)


def _bodies(batch: list[Pending], created: set[tuple[str, str]]) -> list[dict[str, object]]:
    """The ``bodies`` rows of the deliveries that stored an event (a replayed batch stores none)."""
    return [
        item.body
        for item in batch
        if item.body is not None and any((item.endpoint.name, e.event_id) in created for e in item.verified.events)
    ]


def _sort(batch: list[Pending], created: set[tuple[str, str]]) -> None:
    """Tell each delivery which of its events the batch stored: a key stored by this batch is new
    for the first delivery that carries it only."""
    for item in batch:
        keys = [(item.endpoint.name, e.event_id) for e in item.verified.events]
        item.new = [e for p, e in keys if (p, e) in created]
        created.difference_update(keys)


def _duplicates(batch: list[Pending]) -> dict[tuple[str, str], int]:
    """After ``_sort``: each event delivered again by this batch, and by how many of its deliveries."""
    again: dict[tuple[str, str], int] = {}
    for item in batch:
        for event_id in {e.event_id for e in item.verified.events}.difference(item.new):
            key = (item.endpoint.name, event_id)
            again[key] = again.get(key, 0) + 1
    return again


def _confirmed(batch: list[Pending]) -> list[tuple[str, str]]:
    """After a commit: the keys the database now holds, for ``known``. Those of a delivery with a
    replay key only when stored (an insert of one can be skipped for its key, not its id)."""
    return [
        (item.endpoint.name, e.event_id)
        for item in batch
        for e in item.verified.events
        if item.verified.replay_key is None or e.event_id in item.new
    ]


def replayed(rt: Runtime, endpoint: Endpoint, verified: Verified, now: datetime) -> bool:
    """After the commit, for a delivery that stored nothing: whether its replay key is held by
    another event id, stored or purged (tombstoned): a captured signature re-sent with another id
    or topic, answered as a duplicate, counted under ``replayed_signature``."""
    if verified.replay_key is None:
        return False
    return rt.store.replayed(endpoint.name, verified.replay_key, {e.event_id for e in verified.events}, now)


_committers: weakref.WeakKeyDictionary[Runtime, GroupCommit] = weakref.WeakKeyDictionary()
_committers_lock = threading.Lock()


def committer(rt: Runtime) -> GroupCommit:
    """The runtime's ``GroupCommit`` (one per runtime: its deliveries share batches)."""
    with _committers_lock:
        found = _committers.get(rt)
        if found is None:
            found = _committers[rt] = GroupCommit(rt)
        return found


def _result(item: Pending) -> Pending:
    if item.error is not None:
        raise item.error
    return item
