"""Handler modules: ``serve`` and ``worker`` refuse to start on one they cannot import (naming it
and the error); the working directory is on the import path; and a job whose handlers fail to load
records the error and counts the attempt, ending ``failed`` instead of retrying unseen forever."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from flask import Flask

from tests.conftest import base_config, drain, make_app, rows, stripe_event, stripe_headers
from tests.support.processes import BIN, clean_env
from tests.support.templates import migrated
from webhooks.worker.sweeper import sweep

MISSING = "myapp_that_is_not_there.handlers"
EXPECTED = (
    f"Error: configuration: WEBHOOKS_HANDLERS: cannot import '{MISSING}' "
    "(ModuleNotFoundError: No module named 'myapp_that_is_not_there')"
)


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_service_refuses_a_handler_module_it_cannot_import(
    command: str, pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    migrated(pg_url)
    extra = {"REDIS_URL": redis_url, "DATABASE_URL": pg_url} if command == "worker" else {}
    env = clean_env(WEBHOOKS_HANDLERS=MISSING, STRIPE_WEBHOOK_SECRET="whsec_x", **extra)
    args = [str(BIN / "webhooks"), command] + (["--port", "0"] if command == "serve" else [])
    result = subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.strip().splitlines()[-1] == EXPECTED
    assert "Traceback" not in result.stderr


def test_the_working_directory_is_on_the_import_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from webhooks.worker import handlers

    package = tmp_path / "cwdapp_handlers_probe"
    package.mkdir()
    (package / "__init__.py").write_text("LOADED = True\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", str(tmp_path))])
    handlers.load(["cwdapp_handlers_probe"])
    assert __import__("cwdapp_handlers_probe").LOADED


@pytest.fixture
def broken(sqlite_url: str) -> Flask:
    return make_app(base_config(sqlite_url, WEBHOOKS_HANDLERS=MISSING, WEBHOOKS_MAX_ATTEMPTS="3"))


def test_a_job_whose_handlers_cannot_load_records_each_attempt_then_fails(broken: Flask) -> None:
    body = stripe_event("evt_noload")
    assert broken.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200
    drain(broken)  # RQ retries (base 0 s) until the last attempt
    status, attempts, error = rows(broken, "SELECT status, attempts, last_error FROM events")[0]
    assert (status, attempts) == ("failed", 3)
    assert error.startswith(f"ConfigError: WEBHOOKS_HANDLERS: cannot import '{MISSING}'")
    assert rows(broken, "SELECT count(*) FROM attempts WHERE status = 'error'")[0][0] == 3
    rt = broken.extensions["webhooks"]
    assert sweep(rt, age=0) == 0  # nothing left for the sweeper to enqueue again
