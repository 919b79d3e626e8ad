"""The service's real processes in tests: the environment they get, the gunicorn command, starting and
stopping them, waiting until one answers HTTP, and posting to them and reading their database."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import requests
import sqlalchemy as sa

from tests.conftest import ADMIN_PASSWORD, ROOT, stripe_event, stripe_headers, wait_until
from tests.support import environment

BIN = Path(sys.executable).parent


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without the service's variables (so the developer's own never leak in), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not environment.from_the_shell(k)}
    env["WEBHOOKS_CONFIG"] = ""  # no webhooks.toml from the working directory (``extra`` may name one)
    # Metrics files of this run's processes only: the default directory is one per user, shared
    # with another copy of the suite running at the same time.
    metrics = Path(tempfile.gettempdir()) / f"webhooks-test-metrics-{os.getpid()}"
    metrics.mkdir(exist_ok=True)  # `webhooks serve` does not create it
    env.update(PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", PROMETHEUS_MULTIPROC_DIR=str(metrics))
    env.update(extra)
    return env


def gunicorn_cmd(port: int, *extra: str) -> list[str]:
    """The production web command (as the Procfile runs it) bound to ``port`` on localhost."""
    return [
        str(BIN / "gunicorn"),
        "webhooks:create_app()",
        "-c",
        "python:webhooks.gunicorn_conf",
        "--bind",
        f"127.0.0.1:{port}",
        "--access-logfile",
        "/dev/null",
        *extra,
    ]


@contextlib.contextmanager
def running(cmd: list[str], env: dict[str, str], cwd: Path | str = ROOT) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_http(url: str) -> None:
    def up() -> bool:
        try:
            requests.get(url, timeout=5)
            return True
        except requests.RequestException:  # not listening yet, or accepted while the app still imports
            return False

    wait_until(up, timeout=90)  # gunicorn imports the app first: seconds on a loaded machine


def event_status(base: str, provider: str, event_id: str, password: str = ADMIN_PASSWORD) -> Any:
    response = requests.get(f"{base}/admin/api/events/{provider}/{event_id}", auth=("admin", password), timeout=30)
    return response.json().get("status") if response.status_code == 200 else None


def one(url: str, sql: str) -> object:
    """The first row ``sql`` returns from the database at ``url`` (a fresh engine: the service's own may be down)."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text(sql)).first()
    finally:
        engine.dispose()


def status(url: str, event_id: str) -> str:
    row = one(url, f"SELECT status FROM events WHERE event_id = '{event_id}'")
    return str(row[0]) if row else ""  # type: ignore[index]


def post(base: str, event_id: str, type_: str = "test.slow") -> None:
    """One signed Stripe delivery to the service at ``base``, which must acknowledge it."""
    body = stripe_event(event_id, type_)
    assert requests.post(f"{base}/webhooks/stripe", data=body, headers=stripe_headers(body), timeout=60).ok
