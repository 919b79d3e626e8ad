"""What every service process (gunicorn's master, ``webhooks worker``, ``webhooks serve``) sets up
first, before the app or the jobs are imported: its log format and the metrics directory.

Logs: ``WEBHOOKS_LOG_FORMAT=json|text`` (default: text on a terminal, JSON otherwise) at
``WEBHOOKS_LOG_LEVEL`` (default INFO). A log call's ``extra={"fields": {...}}`` become JSON keys, or
``key=value`` pairs in text. Tracebacks are logged at DEBUG only where a one-line message is enough.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

MULTIPROC = "PROMETHEUS_MULTIPROC_DIR"


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
        return json.dumps(data, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = getattr(record, "fields", {})
        if not fields:
            return line
        head, sep, rest = line.partition("\n")  # fields stay on the message's line, before a traceback
        pairs = " ".join(f"{k}={json.dumps(v, default=str, ensure_ascii=False)}" for k, v in fields.items())
        return f"{head} {pairs}{sep}{rest}"


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


def prepare_metrics_dir(directory: str | None = None) -> str:
    """Multiprocess metrics for this process and its children; call before ``prometheus_client``
    is imported (``webhooks.metrics`` imports it).

    The directory is ``PROMETHEUS_MULTIPROC_DIR`` (else one per user under the temp directory),
    created if missing; the files of processes that are gone are removed, so a deployment start
    begins from the live processes' samples.
    """
    default = Path(tempfile.gettempdir()) / f"webhooks-metrics-{os.getuid()}"
    path = Path(directory or os.environ.get(MULTIPROC) or default)
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
