"""What every service process (gunicorn's master, ``webhooks worker``, ``webhooks serve``) sets up
first, before the app or the jobs are imported: its log format and the metrics directory; whether
the address it is to listen on is free; the version it announces.

Logs: ``WEBHOOKS_LOG_FORMAT=json|text`` (default: text on a terminal, JSON otherwise) at
``WEBHOOKS_LOG_LEVEL`` (default INFO). A log call's ``extra={"fields": {...}}`` become JSON keys, or
``key=value`` pairs in text. Tracebacks are logged at DEBUG only where a one-line message is enough.
Whatever a sender put in a value (an event id, a header), one record is one line: every control
character (C0, DEL, C1), line or paragraph separator, lone surrogate and bidirectional override is
written escaped (``\\x9b``, ``\\u2028`` in text; ``\\u009b`` in JSON, which decodes to the same value).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import socket
import sys
import tempfile
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

MULTIPROC = "PROMETHEUS_MULTIPROC_DIR"
# What a terminal or a log pipeline could take for a line break, an escape sequence or a reordering
# of the text (CSI is U+009B, NEL U+0085), or cannot encode at all (a lone surrogate).
UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")

# The chunks of a traceback whose line breaks are its own: headers, frames, chain separators.
FRAMES = ("Traceback (most recent call last):", "  File ", "\nThe above exception", "\nDuring handling")


def _text_escape(match: re.Match[str]) -> str:
    char = match.group()
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char) or (
        f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"
    )


def printable(text: str) -> str:
    """``text`` on one line, its unprintable characters escaped as Python writes them (``\\x9b``)."""
    return UNPRINTABLE.sub(_text_escape, text)


def json_printable(text: str) -> str:
    """Serialized JSON with the characters ``json.dumps`` leaves raw written as ``\\uXXXX``."""
    return UNPRINTABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        data.update(getattr(record, "fields", {}))
        if record.exc_info:
            data["traceback"] = self.formatException(record.exc_info)
        # Outside strings JSON is ASCII, so an escape written anywhere in the text lands in a string.
        return json_printable(json.dumps(data, default=str, ensure_ascii=False))


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        record.message = record.getMessage()
        record.asctime = self.formatTime(record, self.datefmt)
        line = printable(self.formatMessage(record))
        fields = getattr(record, "fields", {})
        if fields:  # on the message's line, before a traceback; each value stays JSON
            line += " " + json_printable(
                " ".join(f"{k}={json.dumps(v, default=str, ensure_ascii=False)}" for k, v in fields.items())
            )
        # Not record.exc_text: another handler may have cached the unescaped text there.
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        if record.stack_info:
            line += "\n" + "\n".join(printable(part) for part in self.formatStack(record.stack_info).split("\n"))
        return line

    def formatException(self, ei: Any) -> str:
        """The traceback on its usual lines; an exception's message (or note) stays on one line,
        escaped, so a newline in it cannot start what looks like a record of its own."""
        out = []
        for chunk in traceback.TracebackException(*ei).format():
            body = chunk.removesuffix("\n")
            if chunk.startswith(FRAMES):
                out.append("\n".join(printable(part) for part in body.split("\n")))
            else:
                out.append(printable(body))
        return "\n".join(out)


def configure_logging(level: str, fmt: str | None, stream: Any = None) -> None:
    """One handler on the root logger; ``fmt`` None picks text on a terminal and JSON otherwise."""
    stream = stream or sys.stderr
    if fmt is None:
        fmt = "text" if getattr(stream, "isatty", lambda: False)() else "json"
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Alembic announces every plugin it loads at INFO: noise in one-line error output.
    logging.getLogger("alembic.runtime.plugins").setLevel(max(logging.WARNING, root.level))


def warn_unknown_variables() -> None:
    """Log one warning per misspelt ``WEBHOOKS_*`` variable (after ``configure_logging``)."""
    from webhooks.configuration.settings import unknown_variables

    for warning in unknown_variables():
        logging.getLogger("webhooks.config").warning("%s", warning)


def admin_password_file(database_url: str) -> Path:
    """Where ``webhooks serve`` keeps the admin password it generated: beside the SQLite database
    (``webhooks.engines`` → ``webhooks.db.admin-password``), else in the working directory."""
    from sqlalchemy.engine import make_url

    url = make_url(database_url)
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        database = Path(url.database)
        return database.with_name(database.name + ".admin-password")
    return Path("webhooks.admin-password")


def kept_password(path: Path, generate: Callable[[], str]) -> str:
    """The password kept in ``path``, or a new one from ``generate`` written there; the file is
    the owner's only (0600): it opens the console."""
    try:
        kept = path.read_text().strip()
    except FileNotFoundError:
        kept = ""
    if kept:
        if path.stat().st_mode & 0o077:
            logging.getLogger("webhooks.process_setup").warning("%s was readable by others: now 0600", path)
            path.chmod(0o600)
        return kept
    password = generate()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        os.fchmod(fd, 0o600)  # an empty file left before keeps its mode through O_CREAT
        file.write(password + "\n")
    return password


def quiet(*names: str) -> None:
    """Drop these loggers' INFO chatter unless the level asks for DEBUG."""
    if logging.getLogger().level > logging.DEBUG:
        for name in names:
            logging.getLogger(name).setLevel(logging.WARNING)


def prepare_metrics_dir(directory: str | None = None) -> str:
    """Multiprocess metrics for this process and its children; call before ``prometheus_client``
    is imported (``webhooks.metrics`` imports it).

    The directory is ``PROMETHEUS_MULTIPROC_DIR`` (else one per user and deployment under the temp
    directory: ``webhooks-metrics-<uid>-<config.deployment()>``, so two deployments on one host never
    add up or delete each other's samples), created if missing; the files of processes that are
    gone are removed, so a deployment start begins from the live processes' samples.
    """
    from webhooks.configuration import settings as config
    from webhooks.configuration.settings import deployment

    default = Path(tempfile.gettempdir()) / f"webhooks-metrics-{os.getuid()}-{deployment()}"
    path = Path(directory or config.metrics_dir() or default)
    path.mkdir(parents=True, exist_ok=True)
    os.environ[MULTIPROC] = str(path)
    for file in path.glob("*.db"):
        pid = file.stem.rsplit("_", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            file.unlink(missing_ok=True)
    return str(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def version() -> str:
    """The installed package's version (``webhooks --version``, ``serve``'s banner, ``/healthz``)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("webhooks")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def bind_problem(host: str, port: int) -> str | None:
    """Why a web server could not listen on ``host:port`` (in use, not allowed, no such local
    address), or None. Checked before gunicorn binds: it would try five times over five seconds,
    two error lines each, without saying what to do."""
    if not 0 <= port <= 65535:
        return f"{port} is not a port number (0 to 65535)"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (OSError, UnicodeError):  # an unknown host name: gunicorn's own error says so
        return None
    probe = socket.socket(family, kind, proto)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn binds: TIME_WAIT is free
        probe.bind(address)
    except OSError as exc:
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        reason = "is already in use" if exc.errno == errno.EADDRINUSE else f"cannot be listened on ({exc.strerror})"
        return f"{where} {reason}"
    finally:
        probe.close()
    return None


def key_file_missing(database_url: str) -> str | None:
    """One line when the database's key file is absent but the database holds sealed secrets (a
    database restored without its key): ``serve`` must not make a new key and start as if empty."""
    from webhooks.configuration import encryption

    path = encryption.key_file(database_url)
    if path is None or path.is_file() or not path.with_name(path.name.removesuffix(".key")).is_file():
        return None
    count = sealed_count(database_url)
    if not count:
        return None
    database = path.name.removesuffix(".key")
    return (
        f"{path.name} not found beside {database}, which holds {count} sealed secret{'s' * (count != 1)}: "
        f"restore it from the backup you took with {database}, or set WEBHOOKS_ENCRYPTION_KEYS to the "
        "key they were sealed with"
    )


def sealed_count(database_url: str) -> int:
    """How many sealed secrets the database holds (0 when it has no such table yet, or is down)."""
    from sqlalchemy import func, select

    from webhooks.tables.configuration import ConfigSecret

    return _count(database_url, select(func.count()).select_from(ConfigSecret))


def stored_endpoints(database_url: str) -> int:
    """How many endpoints the database holds (created at runtime; 0 when it cannot say)."""
    from sqlalchemy import func, select

    from webhooks.tables.configuration import ConfigItem

    return _count(database_url, select(func.count()).select_from(ConfigItem).where(ConfigItem.kind == "endpoint"))


def _count(database_url: str, query: Any) -> int:
    from sqlalchemy.exc import SQLAlchemyError
    from sqlalchemy.orm import Session

    from webhooks.engines import make_engine

    engine = make_engine(database_url)
    try:
        with Session(engine) as session:
            return int(session.scalar(query) or 0)
    except SQLAlchemyError:
        return 0
    finally:
        engine.dispose()


def missing_key_problem(settings: Any) -> str | None:
    """One line naming the key id when the database holds a secret sealed under a key
    ``WEBHOOKS_ENCRYPTION_KEYS`` (or the key file) lacks: the process must not start."""
    from sqlalchemy.exc import SQLAlchemyError

    from webhooks.configuration.keys import UnknownKeyError
    from webhooks.engines import make_engine
    from webhooks.store.configuration.items import missing_key

    engine = make_engine(settings.database_url)
    try:
        from sqlalchemy.orm import Session

        with Session(engine) as session:
            kid = missing_key(session, settings.keyring)
    except SQLAlchemyError:
        return None  # not migrated yet, or down: the process's own checks say so
    finally:
        engine.dispose()
    return None if kid is None else str(UnknownKeyError(kid))
