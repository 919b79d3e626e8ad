"""Refused deliveries: counted by reason, kept (bounded) for diagnosis, re-verifiable later."""

from __future__ import annotations

import base64
import hmac
import logging
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, insert
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from webhooks.db import redact, upsert
from webhooks.errors import VerificationError
from webhooks.models import Rejection, RejectionCount
from webhooks.providers.base import Endpoint, Verified
from webhooks.runtime import Runtime

log = logging.getLogger(__name__)
AUTH_MARK = "X-Webhooks-Authorization-Mark"
PRUNE_BY_AGE_EVERY = 100  # rows; pruning by count happens on every insert


def count(session: Session, endpoint: str, reason: str, now: datetime) -> None:
    stmt = upsert(session, RejectionCount).values(endpoint=endpoint, reason=reason, count=1, last_at=now)
    session.execute(stmt.on_conflict_do_update(
        index_elements=["endpoint", "reason"],
        set_={"count": RejectionCount.count + 1, "last_at": stmt.excluded.last_at},
    ))


def _basic(endpoint: Endpoint) -> str:
    return "Basic " + base64.b64encode((endpoint.basic_auth or "").encode()).decode()


def keep_headers(rt: Runtime, endpoint: str, headers: dict[str, str]) -> dict[str, str]:
    """Headers fit to keep: credentials redacted, but a note that the basic auth was right, so a
    re-verify can pass it without the password ever being stored."""
    kept = redact(headers)
    config = rt.settings.endpoints.get(endpoint)
    auth = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
    if config is not None and config.basic_auth and hmac.compare_digest(auth.encode(), _basic(config).encode()):
        kept[AUTH_MARK] = "verified"
    return kept


def restore_headers(endpoint: Endpoint, kept: dict[str, str]) -> dict[str, str]:
    """The headers for a re-verify: the Authorization header comes back only if it was right."""
    headers = {k: v for k, v in kept.items() if k != AUTH_MARK}
    if endpoint.basic_auth and kept.get(AUTH_MARK) == "verified":
        headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        headers["Authorization"] = _basic(endpoint)
    return headers


def record(
    rt: Runtime, endpoint: str, error: VerificationError, headers: dict[str, str], body: bytes, url: str
) -> None:
    """Count and keep a rejection; never raises (the 4xx must go out whatever happens here)."""
    now = datetime.now(UTC)
    settings = rt.settings
    config = settings.endpoints.get(endpoint)
    kind = config.provider if config else None
    headers = keep_headers(rt, endpoint, headers)
    try:
        with rt.sessions.begin() as session:
            count(session, endpoint, error.reason, now)
            if settings.quarantine_rows <= 0:
                return
            new_id = session.execute(insert(Rejection).values(
                endpoint=endpoint[:100], kind=kind, reason=error.reason, detail=error.detail[:500],
                http_status=error.status, received_at=now, url=url, headers=headers, body=body,
            ).returning(Rejection.id)).scalar_one()
            # ids only grow, so this keeps at most the newest N rows with one indexed range delete.
            session.execute(delete(Rejection).where(Rejection.id <= new_id - settings.quarantine_rows))
            if new_id % PRUNE_BY_AGE_EVERY == 0:
                cutoff = now - timedelta(days=settings.quarantine_days)
                session.execute(delete(Rejection).where(Rejection.received_at < cutoff))
    except DBAPIError as exc:
        log.warning("could not quarantine a rejected request: %s", exc.__class__.__name__)


def reverify(rt: Runtime, rejection_id: int) -> tuple[Rejection | None, Verified | VerificationError]:
    """Verify a kept rejection again under today's configuration, judging its timestamp against
    its arrival time; when it passes it is stored and processed as if it had just arrived."""
    from webhooks.receive import accept  # the receiver's own path, not a copy of it

    with rt.sessions() as session:
        rejection = session.get(Rejection, rejection_id)
    if rejection is None:
        return None, VerificationError("not_found", status=404)
    endpoint = rt.settings.endpoints.get(rejection.endpoint)
    headers = restore_headers(endpoint, rejection.headers) if endpoint else dict(rejection.headers)
    arrival = rejection.received_at if rejection.received_at.tzinfo else rejection.received_at.replace(tzinfo=UTC)
    result: Verified | VerificationError
    try:
        result = accept(rt, rejection.endpoint, headers, rejection.body, rejection.url, now=arrival.timestamp())
        outcome = "stored"
    except VerificationError as exc:
        result, outcome = exc, f"rejected: {exc.reason}"
    with rt.sessions.begin() as session:
        row = session.get(Rejection, rejection_id)
        if row is not None:
            row.outcome, row.reverified_at = outcome, datetime.now(UTC)
    return rejection, result
