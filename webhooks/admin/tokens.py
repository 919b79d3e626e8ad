"""Named API tokens for ``/admin/api``: who made a request, where one shared password cannot say.

A token is ``wht_`` + ``secrets.token_urlsafe(32)`` (256 random bits), shown once when it is
created and stored only as its SHA-256 (hex): a random token of that strength needs no slow hash,
and a stolen table gives no usable token. A request's token is found by its hash (one indexed
lookup, so every web process sees a new or revoked token at its next request) and compared again
with ``hmac.compare_digest``. ``last_used_at`` is written at most once a ``TOUCH`` per token, by a
conditional UPDATE in its own short transaction: an API client polling every second costs one
write a minute, not one a request. A revoked token's row stays (its name stays in the audit
trail), so its name cannot be given to a new token.

The names ``admin`` (the password's) and ``cli:…`` (the CLI's) belong to the audit trail's other
writers and are refused, as is a name already taken.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
from datetime import datetime, timedelta

from sqlalchemy import or_, select, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from webhooks.engines import is_busy
from webhooks.errors import WebhooksError
from webhooks.tables.tokens import Token as Token  # the table, with the others
from webhooks.timestamps import aware

log = logging.getLogger(__name__)
PREFIX = "wht_"
TOUCH = timedelta(minutes=1)  # last_used_at is at most this stale: one write a minute per token
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,99}")
RESERVED = "admin"  # the password's name in the audit trail
CLI = "cli:"  # the CLI's names in the audit trail: cli:<login>


class TokenError(WebhooksError):
    """A token that cannot be created or revoked as asked; the message is one line for a person."""


def digest(token: str) -> str:
    """The stored form of ``token``: its SHA-256, hex."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def check_name(name: str) -> None:
    """Raise ``TokenError`` for a name the audit trail keeps for others, or one no name may be."""
    if name == RESERVED or name.startswith(CLI):
        raise TokenError(f"the name {name!r} is reserved: 'admin' is the password's, 'cli:…' the CLI's")
    if not NAME.fullmatch(name):
        raise TokenError(
            f"bad token name {name!r}: 1 to 100 of letters, digits and . _ @ + -, starting with a letter or digit"
        )


def create(session: Session, name: str, read_only: bool, *, now: datetime) -> str:
    """Store a new token named ``name`` and return it (the only time it is seen); commits.
    Raises ``TokenError`` for a reserved or malformed name, or one in use or revoked."""
    check_name(name)
    existing = session.get(Token, name)
    if existing is not None:
        state = "was revoked; its name stays in the audit trail" if existing.revoked_at else "exists"
        raise TokenError(f"a token named {name!r} {state}: choose another name")
    token = PREFIX + secrets.token_urlsafe(32)
    session.add(Token(name=name, token_hash=digest(token), read_only=read_only, created_at=now))
    session.commit()  # a concurrent create of the same name fails here on the primary key
    return token


def authenticate(session: Session, token: str, *, now: datetime) -> Token | None:
    """The live token ``token`` is, or None (unknown, revoked, or not a token at all). Ends the
    session's transaction, and marks the token used when its last use is older than ``TOUCH``."""
    if not token.startswith(PREFIX):
        return None
    wanted = digest(token)
    found = session.scalar(select(Token).where(Token.token_hash == wanted))
    session.commit()  # the read's transaction ends: the touch below is a write of its own
    if found is None or not hmac.compare_digest(found.token_hash, wanted) or found.revoked_at is not None:
        return None
    if found.last_used_at is None or now - aware(found.last_used_at) >= TOUCH:
        _touch(session, found.name, now)
        found.last_used_at = now
    return found


def _touch(session: Session, name: str, now: datetime) -> None:
    """Mark ``name`` used now, unless another request (any process) did within ``TOUCH``."""
    stale = or_(Token.last_used_at.is_(None), Token.last_used_at <= now - TOUCH)
    try:
        touch = update(Token).where(Token.name == name, stale).values(last_used_at=now)
        session.execute(touch.execution_options(synchronize_session=False))  # the caller sets its copy
        session.commit()
    except OperationalError as exc:
        session.rollback()
        if not is_busy(exc):
            raise
        # SQLite's one writer is busy: the next request marks it; auth never waits on a timestamp.
        log.debug("api token %s: last use not recorded (database busy)", name)


def listed(session: Session) -> list[Token]:
    """Every token, revoked ones too, oldest first."""
    return list(session.scalars(select(Token).order_by(Token.created_at, Token.name)))


def revoke(session: Session, name: str, *, now: datetime) -> None:
    """Revoke ``name`` from now on (its next request is 401); commits. Raises ``TokenError`` when
    there is no such token or it is revoked already."""
    found = session.get(Token, name)
    if found is None:
        raise TokenError(f"no token named {name!r}")
    if found.revoked_at is not None:
        raise TokenError(f"the token {name!r} is revoked already")
    found.revoked_at = now
    session.commit()
