"""The two service URLs of the environment, checked at start-up: ``DATABASE_URL`` and
``REDIS_URL`` (with Sentinel's form). Each mistake is one ``ConfigError`` saying what is wrong and
what to write, never echoing a password; ``webhooks.configuration.settings`` reads the variables, this checks them."""

from __future__ import annotations

import difflib
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from webhooks.errors import ConfigError


def database_url(url: str) -> str:
    """Accept Heroku-style ``postgres://`` and plain ``postgresql://``; use psycopg 3."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


# What DATABASE_URL may name: the drivers installed with the package.
DATABASE_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg", "sqlite", "sqlite+pysqlite")
DATABASE_EXAMPLE = "postgresql://user:password@host:5432/name or sqlite:///path/to/webhooks.db"


def checked_database_url(url: str) -> str:
    """``DATABASE_URL`` mapped by ``database_url``, or a ``ConfigError`` saying what is wrong with it
    and what to write: a typo in the scheme, a database not supported, a SQLite file in a directory
    that does not exist (SQLAlchemy would fail later, with a traceback). Never echoes a password."""
    scheme, sep, rest = url.partition("://")
    if not sep or not scheme or not scheme.replace("+", "").replace("-", "").isalnum():
        raise ConfigError(f"DATABASE_URL is not a database URL; expected {DATABASE_EXAMPLE}")
    if scheme.lower() not in DATABASE_SCHEMES:
        close = difflib.get_close_matches(scheme.lower(), ["postgresql", "sqlite"], n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}://?" if close else f"supported: PostgreSQL and SQLite, {DATABASE_EXAMPLE}"
        raise ConfigError(f"DATABASE_URL: unsupported database scheme {scheme!r}:// ({hint})")
    if scheme.lower().startswith("sqlite"):
        _check_sqlite_path(rest)
    return database_url(url)


def _check_sqlite_path(rest: str) -> None:
    path, _, query = rest.partition("?")
    if path and not path.startswith("/"):  # sqlite://name.db: the name would be taken as a host
        raise ConfigError("DATABASE_URL: a SQLite URL is sqlite:///relative/path.db or sqlite:////absolute/path.db")
    name = path[1:]
    if not name or name == ":memory:" or "uri=true" in query.lower():
        return  # in memory, or a SQLite URI filename: SQLite's own rules
    directory = Path(name).parent
    if not directory.is_dir():
        where = "" if directory.is_absolute() else f" (relative to {Path.cwd()})"
        raise ConfigError(
            f"DATABASE_URL: the SQLite file's directory {str(directory)!r} does not exist{where}; "
            "create it or fix the path"
        )


@dataclass(frozen=True)
class Sentinels:
    """``redis+sentinel://[[user]:password@]host:port[,host:port…]/service[/db]``: the sentinels to
    ask, the monitored master's name, the database; the credentials are the master's."""

    hosts: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None


def sentinels(url: str) -> Sentinels | None:
    """The sentinels a ``REDIS_URL`` names; None for a plain Redis URL. ``ConfigError`` if malformed."""
    if not url.startswith("redis+sentinel://"):
        return None
    from urllib.parse import unquote

    rest = url.removeprefix("redis+sentinel://")
    userinfo, _, rest = rest.rpartition("@")
    netloc, _, path = rest.partition("/")
    parts = [p for p in path.split("/") if p]
    hosts = []
    try:
        for item in netloc.split(","):
            host, sep, port = item.rpartition(":")
            hosts.append((host, int(port)) if sep else (item, 26379))
        db = int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        raise ConfigError("REDIS_URL: sentinel ports and the database must be numbers") from None
    if not parts or not all(h for h, _ in hosts):
        raise ConfigError("REDIS_URL: expected redis+sentinel://host:port[,host:port…]/service[/db]")
    user, _, password = userinfo.partition(":")
    return Sentinels(tuple(hosts), unquote(parts[0]), db, unquote(user) or None, unquote(password) or None)


def redis_address(url: str) -> str:
    """Where a ``REDIS_URL`` points, fit to print: host:port (or the sentinels, or the socket's
    path), never the password."""
    from urllib.parse import urlsplit

    found = sentinels(url)
    if found is not None:
        return f"{','.join(f'{h}:{p}' for h, p in found.hosts)} (sentinels of {found.service!r})"
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return parts.path
    try:
        port = parts.port or 6379
    except ValueError:
        port = 6379
    return f"{parts.hostname or 'localhost'}:{port}"


REDIS_EXAMPLE = "redis://[:password@]host:6379/0 (or rediss://, unix://, redis+sentinel://)"


def redis_url(url: str | None) -> str | None:
    """``REDIS_URL`` as redis-py takes it, or a ``ConfigError`` now (redis-py's ``ValueError``
    would come later, as a traceback); never echoes a password."""
    if not url:
        return None
    if sentinels(url) is not None:  # a malformed sentinel URL fails at start-up
        return url
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss", "unix") or "://" not in url:
        raise ConfigError(f"REDIS_URL is not a Redis URL; expected {REDIS_EXAMPLE}")
    try:
        parts.port  # noqa: B018  # the property parses the port: a ValueError when it is not a number
    except ValueError:
        raise ConfigError(f"REDIS_URL: the port must be a number; expected {REDIS_EXAMPLE}") from None
    return url


def redacted(url: str) -> str:
    """``url`` as the API, the console, the banner and logs show it: its ``user:password@`` and its
    query string (a token, often) replaced by ``***``, its fragment dropped; scheme, host, port and
    path as they are. The one form for every destination, the file's and the database's."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # an unbalanced [ in the host: nothing safe to show but that
        return "(a URL that does not parse)"
    _, at, host = parts.netloc.rpartition("@")
    netloc = ("***@" if at else "") + host
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "***" if parts.query else "", ""))


def without_credentials(url: str) -> str:
    """``url`` without its ``user:password@``: a bus's identity (new credentials, the same bus)."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
