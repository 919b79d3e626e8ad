"""An event's life, written once: every change of ``events.status`` the store makes.

Each ``Move`` names the statuses a row may be in for it to apply (``sources``; none for a new
row) and the ones it may leave the row in (``targets``). The adapters build their conditions and
values from these, and nothing outside ``webhooks.store`` writes a status::

    (new) ──store──▶ queued ──claim──▶ processing ──mark──▶ processed | ignored
             queued ──leave──▶ received             └──fail──▶ queued | failed (after the last try)
    received | queued ──requeue──▶ queued   (sweeper: its job never reached Redis, or Redis lost it)
    processing ──abandon──▶ queued | failed  (sweeper: no transaction holds it; failed once spent)
    any but processing ──replay──▶ queued    (operator)

``mark`` to ``ignored`` may carry a reason as the row's last error (``dismiss``: a nudge that
named an object its provider does not have, ``unknown_object``).

A claim is a token: ``attempts + 1``. Only the holder of the latest claim may ``mark`` or
``fail`` the row, so a superseded claim (a replay, a recovered job) changes nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from webhooks.vocabulary import CLAIMABLE, Status


class Move(NamedTuple):
    """One kind of status change: from ``sources`` (empty: a new row) to one of ``targets``."""

    name: str
    sources: tuple[Status, ...]
    targets: tuple[Status, ...]
    by: str


STORE = Move("store", (), (Status.QUEUED,), "receiver: a new event, its job on the way")
LEAVE = Move(
    "leave",
    (Status.QUEUED,),
    (Status.RECEIVED,),
    "receiver or replay: Redis refused the job; the sweeper queues it later",
)
CLAIM = Move(
    "claim",
    CLAIMABLE,
    (Status.PROCESSING,),
    "worker: attempts + 1 becomes the claim's token (processing: a claim abandoned, superseded)",
)
MARK = Move("mark", (Status.PROCESSING,), (Status.PROCESSED, Status.IGNORED), "worker, under its claim's token")
FAIL = Move(
    "fail",
    (Status.PROCESSING,),
    (Status.QUEUED, Status.FAILED),
    "worker, under its claim's token: failed after the last try",
)
REQUEUE = Move(
    "requeue",
    (Status.RECEIVED, Status.QUEUED),
    (Status.QUEUED,),
    "sweeper: the job never reached Redis, or Redis lost it",
)
ABANDON = Move(
    "abandon",
    (Status.PROCESSING,),
    (Status.QUEUED, Status.FAILED),
    "sweeper: no transaction holds the row; failed once its attempts are spent",
)
REPLAY = Move(
    "replay",
    tuple(s for s in Status if s != Status.PROCESSING),
    (Status.QUEUED,),
    "operator: a replay (audited); a row being processed is left alone",
)

TABLE = (STORE, LEAVE, CLAIM, MARK, FAIL, REQUEUE, ABANDON, REPLAY)


class TransitionError(ValueError):
    """A status change the table does not allow (a bug in an adapter, never an input's fault)."""


def values(move: Move, to: Status, now: datetime) -> dict[str, object]:
    """The columns a ``move`` to ``to`` writes: ``status`` and ``status_at``."""
    if to not in move.targets:
        raise TransitionError(f"{move.name} cannot leave an event {to}")
    return {"status": to, "status_at": now}


def allowed(source: Status | None, target: Status) -> bool:
    """Whether some move takes a row from ``source`` (None: a new row) to ``target``."""
    return any((source in m.sources if source is not None else not m.sources) and target in m.targets for m in TABLE)
