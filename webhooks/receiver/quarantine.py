"""Refused deliveries: counted by reason, kept (bounded) for diagnosis, re-verifiable later."""

from __future__ import annotations

import base64
import hmac
import json
import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar

from sqlalchemy import Text, cast, delete, func, insert, or_, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker
from werkzeug.datastructures import Authorization

from webhooks import providers
from webhooks.configuration.settings import Settings
from webhooks.errors import ConfigError, VerificationError
from webhooks.providers.base import Endpoint, Verified
from webhooks.storable import redact, storable_text
from webhooks.store.rejections import count_rejection
from webhooks.tables.events import Rejection, RejectionCount
from webhooks.timestamps import aware
from webhooks.vocabulary import Reason


class Runtime(Protocol):
    """What the quarantine uses of a runtime (``webhooks.runtime.Runtime``, which the store it
    builds imports this module through: named here, not imported)."""

    @property
    def settings(self) -> Settings: ...
    @property
    def sessions(self) -> sessionmaker[Session]: ...


log = logging.getLogger("webhooks.quarantine")  # the name the docs and log filters know
# A header name that older versions wrote to mark good basic auth: now only ever client-sent, so it
# is dropped on the way in and hidden on the way out (the fact lives in ``basic_auth_ok``).
AUTH_MARK = "x-webhooks-authorization-mark"
PRUNE_BY_AGE_EVERY = 100  # rows; pruning by size happens on every insert
# The one counter key of every unconfigured endpoint name: the route never matches a name holding
# "/", so no configured endpoint can ever be counted under it (and random names make no rows).
UNKNOWN = "unknown/*"
MAX_URL = 4096  # characters
MAX_HEADERS = 64
MAX_HEADER = 4096  # characters, name and value
MAX_HEADERS_TOTAL = 16 * 1024  # characters


def _basic(endpoint: Endpoint) -> str:
    return "Basic " + base64.b64encode((endpoint.basic_auth or "").encode()).decode()


def basic_credentials(header: str | None) -> bytes:
    """``user:password`` of an HTTP Basic ``Authorization`` value (werkzeug's parser), else ``b""``."""
    try:
        auth = Authorization.from_header(header)
    except ValueError:  # werkzeug hands a non-ASCII token to ``b64decode``, which raises this
        return b""
    if auth is None or auth.type != "basic":
        return b""
    return f"{auth.username}:{auth.password}".encode()


def basic_auth_ok(config: Endpoint | None, headers: dict[str, str]) -> bool:
    """Whether the request carried the endpoint's exact HTTP Basic credentials."""
    if config is None or not config.basic_auth:
        return False
    auth = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
    return hmac.compare_digest(basic_credentials(auth), config.basic_auth.encode())


def keep_headers(headers: dict[str, str]) -> tuple[dict[str, str], int]:
    """Headers fit to keep, and how many were not: credentials redacted, any authorization mark
    dropped, at most ``MAX_HEADERS`` of at most ``MAX_HEADER`` characters (``MAX_HEADERS_TOTAL``
    in all), in the order sent. Genuine deliveries carry a few kilobytes; junk is what is left out."""
    kept: dict[str, str] = {}
    total = dropped = 0
    for name, value in redact(headers).items():
        if name.lower() == AUTH_MARK:
            continue
        size = len(name) + len(value)
        if size > MAX_HEADER or total + size > MAX_HEADERS_TOTAL or len(kept) >= MAX_HEADERS:
            dropped += 1
            continue
        kept[storable_text(name)] = storable_text(value)
        total += size
    return kept, dropped


def restore_headers(endpoint: Endpoint, rejection: Rejection) -> dict[str, str]:
    """The headers for a re-verify: the Authorization header comes back only if it was right."""
    headers = {k: v for k, v in rejection.headers.items() if k.lower() != AUTH_MARK}
    if endpoint.basic_auth and rejection.basic_auth_ok:
        headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        headers["Authorization"] = _basic(endpoint)
    return headers


def signature_headers(rt: Runtime, rejection: Rejection) -> set[str]:
    """Lower-cased names of the headers that carry a signature which, shown, could be replayed
    (schemes that sign no timestamp), under the endpoint's configuration and the kind it had."""
    names: set[str] = set()
    config = rt.settings.endpoints.get(rejection.endpoint)
    if config is not None:
        names.update(providers.get(config.kind).signature_headers(config))
    if rejection.kind:
        try:
            names.update(providers.get(rejection.kind).signature_header_names)
        except ConfigError:
            pass  # a kind this version no longer knows
    return {n.lower() for n in names}


def shown_headers(rt: Runtime, rejection: Rejection) -> dict[str, str]:
    """The headers to display: no mark, and only the length of a replayable signature (the value
    stays stored, for re-verify)."""
    hidden = signature_headers(rt, rejection)
    return {
        k: (f"[signature: {len(v)} chars]" if k.lower() in hidden else v)
        for k, v in rejection.headers.items()
        if k.lower() != AUTH_MARK
    }


# Each endpoint's least share, however many there are (#32: 10 000 database endpoints would leave
# each a tenth of a row): the totals may then be exceeded, at most endpoints × these.
MIN_SHARE_ROWS = 10
MIN_SHARE_BYTES = 64 * 1024


def budget(settings: Settings) -> tuple[int, int]:
    """Rows and bytes each configured endpoint may keep: the totals shared evenly, so junk sent to
    one endpoint never evicts another's rejections, and never less than a useful share."""
    shares = max(1, len(settings.endpoints))
    rows, size = settings.quarantine_rows // shares, settings.quarantine_bytes // shares
    return max(MIN_SHARE_ROWS, rows), max(MIN_SHARE_BYTES, size)


def _row(
    config: Endpoint, error: VerificationError, headers: dict[str, str], body: bytes, url: str, max_bytes: int
) -> dict[str, Any]:
    kept, dropped = keep_headers(headers)
    notes = [error.detail] if error.detail else []
    if dropped:
        notes.append(f"{dropped} headers not kept")
    if len(url) > MAX_URL:
        notes.append(f"URL cut at {MAX_URL} of {len(url)} characters")
        url = url[:MAX_URL]
    if len(body) + len(url) + len(json.dumps(kept)) > max_bytes:
        notes.append(f"body of {len(body)} bytes not kept (over the quarantine budget)")
        body = b""
    return {
        "endpoint": config.name[:100],
        "kind": config.kind,
        "reason": error.reason,
        "detail": "; ".join(notes)[:500],
        "http_status": error.status,
        "url": storable_text(url),
        "headers": kept,
        "body": body,
        "basic_auth_ok": basic_auth_ok(config, headers),
    }


def prune(session: Session, endpoint: str, newest: int, max_rows: int, max_bytes: int) -> None:
    """Keep the endpoint within its row and byte budgets, never deleting its newest row.

    A plain sum decides (a fraction of a millisecond); only when over budget does a window query
    find the cut, down to nine tenths of the budget, so that query (a few milliseconds, under
    SQLite's write lock) runs once per tenth of the share in a flood, not once per request."""
    size = func.length(Rejection.body) + func.length(Rejection.url) + func.length(cast(Rejection.headers, Text))
    mine = Rejection.endpoint == endpoint
    kept, total = session.execute(select(func.count(), func.coalesce(func.sum(size), 0)).where(mine)).one()
    if kept <= max_rows and total <= max_bytes:
        return
    newest_first = Rejection.id.desc()
    ranked = (
        select(
            Rejection.id,
            func.sum(size).over(order_by=newest_first).label("running"),
            func.row_number().over(order_by=newest_first).label("n"),
        )
        .where(mine)
        .subquery()
    )
    low_rows, low_bytes = max_rows - max_rows // 10, max_bytes - max_bytes // 10
    cut = session.scalar(select(func.max(ranked.c.id)).where(or_(ranked.c.running > low_bytes, ranked.c.n > low_rows)))
    if cut is not None:
        session.execute(delete(Rejection).where(mine, Rejection.id <= min(cut, newest - 1)))


def count_page(session: Session, after: str, limit: int) -> tuple[Sequence[RejectionCount], str | None]:
    """Counts of at most ``limit`` endpoints named after ``after``, and the cursor of the next page."""
    names = session.scalars(
        select(RejectionCount.endpoint)
        .where(RejectionCount.endpoint > after)
        .group_by(RejectionCount.endpoint)
        .order_by(RejectionCount.endpoint)
        .limit(limit + 1)
    ).all()
    if not names:
        return [], None
    counts = session.scalars(
        select(RejectionCount)
        .where(RejectionCount.endpoint.in_(names[:limit]))
        .order_by(RejectionCount.endpoint, RejectionCount.reason)
    ).all()
    return counts, (names[limit - 1] if len(names) > limit else None)


def record(
    rt: Runtime, endpoint: str, error: VerificationError, headers: dict[str, str], body: bytes, url: str
) -> None:
    """Count and keep a rejection; never raises (the 4xx must go out whatever happens here)."""
    now = datetime.now(UTC)
    settings = rt.settings
    config = settings.endpoints.get(endpoint)
    try:
        with rt.sessions.begin() as session:
            # Unknown endpoints are only counted, all under one key: any client can invent names.
            count_rejection(session, endpoint if config else UNKNOWN, error.reason, now)
            if config is None or settings.quarantine_rows <= 0 or settings.quarantine_bytes <= 0:
                return
            max_rows, max_bytes = budget(settings)
            new_id = session.execute(
                insert(Rejection)
                .values(
                    received_at=now,
                    **_row(config, error, headers, body, url, max_bytes),
                )
                .returning(Rejection.id)
            ).scalar_one()
            prune(session, config.name[:100], new_id, max_rows, max_bytes)
            if new_id % PRUNE_BY_AGE_EVERY == 0:
                cutoff = now - timedelta(days=settings.quarantine_days)
                session.execute(delete(Rejection).where(Rejection.received_at < cutoff))
    except DBAPIError as exc:
        log.warning("could not quarantine a rejected request: %s", exc.__class__.__name__)


R = TypeVar("R", bound=Runtime, contravariant=True)
S = TypeVar("S", bound=Runtime)


class Accept(Protocol[R]):
    """The receiver's verify-store-enqueue path (``receive.accept``), passed in: the receiver
    imports this module, so this one must not import it back."""

    def __call__(self, rt: R, name: str, headers: dict[str, str], body: bytes, url: str, *, now: float) -> Verified: ...


def reverify(rt: S, rejection_id: int, accept: Accept[S]) -> tuple[Rejection | None, Verified | VerificationError]:
    """Verify a kept rejection again under today's configuration, judging its timestamp against
    its arrival time; when it passes it goes through ``accept`` (the receiver's own path, not a
    copy of it): stored and processed as if it had just arrived."""
    with rt.sessions() as session:
        rejection = session.get(Rejection, rejection_id)
    if rejection is None:
        return None, VerificationError(Reason.NOT_FOUND, status=404)
    endpoint = rt.settings.endpoints.get(rejection.endpoint)
    headers = restore_headers(endpoint, rejection) if endpoint else dict(rejection.headers)
    arrival = aware(rejection.received_at)
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
