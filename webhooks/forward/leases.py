"""What the forwarder has in flight and what came of it: ``Lease`` (one delivery taken for sending,
built by ``webhooks.forward.deliveries.lease``) and ``Result`` (one send's outcome, settled by
``webhooks.forward.settle``); every publisher (``webhooks.forward.kinds``) takes the one and returns
the other."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from webhooks.forward.signing import Message


@dataclass(frozen=True)
class Lease:
    """One delivery in flight: what to send and the token its outcome is settled under."""

    endpoint: str
    event_id: str
    destination: str
    token: int
    attempts: int
    forced: bool
    message: Message
    body: bytes
    probe: bool = False  # sent while the circuit was open: its failure doubles the wait for the next
    traceparent: str | None = None  # the delivery row's: the forward's span continues its trace


@dataclass(frozen=True)
class Result:
    """What one send came to (``status`` None: no HTTP answer; ``error`` says why; ``acknowledged``: a
    bus accepted the message, with ``response`` its id for it)."""

    lease: Lease
    started_at: datetime
    seconds: float
    status: int | None
    error: str | None = None
    retry_after: float | None = None  # 429/503: seconds the destination asked for
    response: str | None = None
    acknowledged: bool = False

    @property
    def delivered(self) -> bool:
        return self.acknowledged or (self.status is not None and 200 <= self.status < 300)
