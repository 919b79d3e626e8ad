"""An event's life, written once: every change of ``events.status`` the store makes.

Each ``Move`` names the statuses a row may be in for it to apply (``sources``; none for a new
row) and the ones it may leave the row in (``targets``). The adapters build their conditions and
values from these, and nothing outside ``webhooks.store`` writes a status::

    (new) ──store──▶ queued ──claim──▶ processing ──mark──▶ processed | ignored
             queued ──leave──▶ received             └──fail──▶ queued | failed (after the last try)
    received | queued ──requeue──▶ queued   (sweeper: its job never reached Redis, or Redis lost it)
    processing ──renew──▶ processing         (worker: the claim's lease extended; status unchanged)
    processing ──interrupt──▶ queued         (worker stopping past its stop timeout: not counted)
    processing ──abandon──▶ queued | failed  (sweeper: its lease is over and no transaction holds
                                              it; failed once spent)
    any but processing ──replay──▶ queued    (operator)

``mark`` to ``ignored`` may carry a reason as the row's last error (``dismiss``: a nudge that
named an object its provider does not have, ``unknown_object``).

A claim is a token: ``attempts + 1``. Only the holder of the latest claim may ``mark`` or
``fail`` the row, so a superseded claim (a replay, a recovered job) changes nothing.

A claim is also a lease (``claimed_until``: the job's timeout plus ``claims.LEASE_GRACE`` from
the claim, renewed under the token while a long provider call runs). While it is live the row
is its job's: the sweeper never abandons it, even when no lock holds it (the provider's API is
called before any lock). An attempt that outlives its lease may find its token stale: it then
marks and fails nothing, and its job logs so and records its attempt's row.
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
RENEW = Move(
    "renew",
    (Status.PROCESSING,),
    (Status.PROCESSING,),
    "worker, under its claim's token: the lease extended while a long call runs (status unchanged)",
)
INTERRUPT = Move(
    "interrupt",
    (Status.PROCESSING,),
    (Status.QUEUED,),
    "worker, under its claim's token: stopped past WEBHOOKS_STOP_TIMEOUT; the attempt is not counted",
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
    "sweeper: the lease is over and no transaction holds the row; failed once its attempts are spent",
)
REPLAY = Move(
    "replay",
    tuple(s for s in Status if s != Status.PROCESSING),
    (Status.QUEUED,),
    "operator: a replay (audited); a row being processed is left alone",
)

TABLE = (STORE, LEAVE, CLAIM, MARK, FAIL, RENEW, INTERRUPT, REQUEUE, ABANDON, REPLAY)
LEASED = (CLAIM, RENEW)  # the moves that write a lease (``claimed_until``)


class TransitionError(ValueError):
    """A status change the table does not allow (a bug in an adapter, never an input's fault)."""


def values(move: Move, to: Status, now: datetime, until: datetime | None = None) -> dict[str, object]:
    """The columns a ``move`` to ``to`` writes: ``status`` and ``status_at``, and for a claim its
    lease ``until`` (``claimed_until``); a renewal writes the lease alone."""
    if to not in move.targets:
        raise TransitionError(f"{move.name} cannot leave an event {to}")
    if (move in LEASED) != (until is not None):
        raise TransitionError(f"{move.name} {'needs' if move in LEASED else 'writes no'} lease")
    if move is RENEW:
        return {"claimed_until": until}
    return {"status": to, "status_at": now} | ({} if until is None else {"claimed_until": until})


def allowed(source: Status | None, target: Status) -> bool:
    """Whether some move takes a row from ``source`` (None: a new row) to ``target``."""
    return any((source in m.sources if source is not None else not m.sources) and target in m.targets for m in TABLE)
