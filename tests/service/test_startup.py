"""Starting it: ``webhooks serve`` prints one log format and its banner last, keeps the admin
password it generated, and ``/`` leads to the console; a misspelt ``WEBHOOKS_*`` variable is named
at start-up; two deployments of one user never share a metrics directory; a worker stopped
cleanly leaves RQ's scheduler lock to the next one."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import stat
import subprocess
import threading
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import pytest
import redis
import requests
from click.testing import CliRunner
from flask.testing import FlaskClient
from rq import Queue
from rq.job import Job
from rq.scheduler import RQScheduler

from tests.conftest import STRIPE_SECRET, free_port, wait_until
from tests.support.processes import BIN, clean_env, running, wait_http
from tests.support.templates import migrated
from webhooks.configuration import settings as config
from webhooks.service.cli import main
from webhooks.service.process_setup import MULTIPROC, prepare_metrics_dir


def test_a_misspelt_variable_is_named_with_the_closest_known_one(tmp_path: Path) -> None:
    env = {"DATABASE_URL": f"sqlite:///{tmp_path / 'w.db'}", "WEBHOOKS_MAX_ATTEMPT": "3", "WEBHOOKS_LOG_FORMAT": "text"}
    result = CliRunner().invoke(main, ["db", "upgrade"], env=env)
    assert result.exit_code == 0, result.output
    assert (
        "WARNING webhooks.config: unknown environment variable WEBHOOKS_MAX_ATTEMPT is ignored"
        " (did you mean WEBHOOKS_MAX_ATTEMPTS?)"
    ) in result.output


def test_only_unknown_webhooks_variables_are_named() -> None:
    env = {
        "WEBHOOKS_MAX_ATTEMPTS": "3",
        "WEBHOOKS_HANDLER": "app",
        "WEBHOOKS_COLOUR": "red",
        "PATH": "/bin",
        "STRIPE_WEBHOOK_SECRET": "whsec_a",
    }
    assert config.unknown_variables(env) == [
        "unknown environment variable WEBHOOKS_COLOUR is ignored (no such setting)",
        "unknown environment variable WEBHOOKS_HANDLER is ignored (did you mean WEBHOOKS_HANDLERS?)",
    ]


def test_the_root_leads_to_the_console(client: FlaskClient) -> None:
    response = client.get("/")
    assert response.status_code == 302
    assert response.headers["Location"] == "/admin/"


def test_two_deployments_of_one_user_get_their_own_metrics_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MULTIPROC, "unset below; restored after the test")
    monkeypatch.chdir(tmp_path)
    dirs = []
    for url in ("postgresql://app@db/shop", "postgresql://app@db/blog", "postgresql://app@db/shop"):
        monkeypatch.delenv(MULTIPROC)
        monkeypatch.setenv("DATABASE_URL", url)
        dirs.append(prepare_metrics_dir())
    shop, blog, shop_again = dirs
    assert shop != blog  # the blog's start would delete the shop's samples of live processes
    assert shop == shop_again  # every process of one deployment adds up in one directory
    assert Path(shop).name.startswith(f"webhooks-metrics-{os.getuid()}-")


def start_serve(cwd: Path, port: int) -> tuple[subprocess.Popen[str], list[str]]:
    """``webhooks serve`` in ``cwd``; returns the process and every line it printed up to and
    including its banner's last line (the endpoints)."""
    env = clean_env(STRIPE_WEBHOOK_SECRET=STRIPE_SECRET, WEBHOOKS_LOG_FORMAT="json", WEBHOOKS_MAX_ATTEMPT="3")
    proc = subprocess.Popen(
        [str(BIN / "webhooks"), "serve", "--port", str(port)],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    # Read on a thread (which keeps the pipe drained): a banner that never comes fails at the deadline.
    threading.Thread(
        target=lambda: lines.extend(line.rstrip("\n") for line in proc.stdout),  # type: ignore[union-attr]
        daemon=True,
    ).start()

    def banner() -> int | None:
        done = [i for i, line in enumerate(list(lines)) if line.startswith("  endpoints")]
        return done[0] + 1 if done else None

    try:
        end = wait_until(banner, timeout=90)
    except AssertionError:
        proc.kill()
        raise AssertionError("no banner:\n" + "\n".join(lines)) from None
    return proc, lines[:end]


def stop(proc: subprocess.Popen[str], said: list[str] | None = None) -> None:
    """SIGTERM, and a clean exit within a minute. A worker that has not stopped by then is made to
    print every thread's stack (``PYTHONFAULTHANDLER``: SIGABRT) into ``said``, which the failure
    shows (a stop of the scheduler-lock test stalled past the minute once in a full CI run)."""
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        time.sleep(0.5)  # the reader takes the last lines
        raise AssertionError("the worker did not stop within 60 s:\n" + "".join((said or [])[-200:])) from None
    finally:
        proc.kill()
    assert code == 0, "".join((said or [])[-50:])


@pytest.mark.slow
def test_serve_prints_one_format_then_its_banner_and_keeps_its_password(tmp_path: Path) -> None:
    port = free_port()
    proc, lines = start_serve(tmp_path, port)
    try:
        base = f"http://127.0.0.1:{port}"
        start = lines.index(f"webhooks {metadata.version('webhooks')} serving on {base}")
        logs, banner = lines[:start], lines[start:]
        records = [json.loads(line) for line in logs]  # gunicorn's lines too: no second format
        messages = [r["message"] for r in records]
        assert any(m.startswith("Booting worker with pid") for m in messages)  # the banner comes after
        assert (
            "unknown environment variable WEBHOOKS_MAX_ATTEMPT is ignored (did you mean WEBHOOKS_MAX_ATTEMPTS?)"
            in messages
        )
        assert any(m.startswith("no handlers (WEBHOOKS_HANDLERS is not set)") for m in messages)
        assert len(logs) <= 8, logs  # not ~20 lines burying the banner
        found = re.fullmatch(rf"  console    {base}/admin/  user admin, password (\S+) \(kept in (.+)\)", banner[1])
        assert found, banner
        password, kept = found.group(1), Path(found.group(2))
        assert banner[2] == f"  endpoints  POST {base}/webhooks/stripe"
        assert kept == tmp_path / "webhooks.db.admin-password"
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600
        assert kept.read_text().strip() == password
        key_file = tmp_path / "webhooks.db.key"  # #32: the key sealing secrets stored through the API
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600 and key_file.read_text().startswith("local-")
        wait_http(base + "/healthz")
        assert requests.get(f"{base}/admin/api/events", auth=("admin", password), timeout=30).status_code == 200
        answer = requests.get(f"{base}/", allow_redirects=False, timeout=30)
        assert (answer.status_code, answer.headers["Location"]) == (302, "/admin/")
    finally:
        stop(proc)
    proc, lines = start_serve(tmp_path, port)  # the next start: the same password, not a new one
    try:
        assert f"password {password} (kept in {kept})" in lines[-2]
    finally:
        stop(proc)


@pytest.mark.slow
def test_a_cleanly_stopped_worker_leaves_the_scheduler_lock_to_the_next(tmp_path: Path, redis_url: str) -> None:
    database = f"sqlite:///{tmp_path / 'w.db'}"
    migrated(database)
    env = clean_env(DATABASE_URL=database, REDIS_URL=redis_url, WEBHOOKS_QUEUE="lock-test", PYTHONFAULTHANDLER="1")
    client = redis.Redis.from_url(redis_url)
    lock = RQScheduler.get_locking_key("lock-test")
    with running([str(BIN / "webhooks"), "worker"], env, cwd=tmp_path) as first:
        said: list[str] = []
        threading.Thread(target=lambda: said.extend(first.stdout or []), daemon=True).start()
        wait_until(lambda: client.exists(lock), timeout=90)
        stop(first, said)
    assert not client.exists(lock)  # was kept for its 61 s: the next worker's retries waited
    queue = Queue("lock-test", connection=client)
    due = queue.enqueue_at(datetime.now(UTC), "os.getpid")  # a retry that is due now
    with running([str(BIN / "webhooks"), "worker"], env, cwd=tmp_path) as second:
        threading.Thread(target=second.stdout.read, daemon=True).start()  # type: ignore[union-attr]
        # Well within the lock's minute, on a slow machine too.
        wait_until(lambda: Job.fetch(due.id, connection=client).get_status() == "finished", timeout=30)
        stop(second)


def test_a_password_from_the_environment_is_never_printed() -> None:
    from webhooks.configuration.settings import Settings
    from webhooks.service.serving import banner

    text = banner(Settings(admin_password="s3cret-from-env"), ["http://127.0.0.1:8000"], None)
    assert "s3cret-from-env" not in text
    assert (
        text.splitlines()[1]
        == "  console    http://127.0.0.1:8000/admin/  user admin, password from WEBHOOKS_ADMIN_PASSWORD"
    )
    assert text.splitlines()[2].startswith("  endpoints  none configured: set STRIPE_WEBHOOK_SECRET=")


def test_the_banner_says_where_the_database_is_never_its_password(tmp_path: Path) -> None:
    """#40: ``docker run … -v data:/data IMAGE`` prints where the database, its key file and the admin
    password file are; a PostgreSQL URL is shown without its password."""
    from webhooks.configuration.settings import Settings
    from webhooks.service.serving import banner

    sqlite = Settings(admin_password="x", database_url=f"sqlite:///{tmp_path / 'events.db'}?timeout=5")
    assert banner(sqlite, ["http://0.0.0.0:8000"], None).splitlines()[-1] == (
        f"  database   {tmp_path.resolve() / 'events.db'} (SQLite)"
    )
    postgres = Settings(admin_password="x", database_url="postgresql+psycopg://app:pg-s3cret@db:5432/webhooks")
    text = banner(postgres, ["http://0.0.0.0:8000"], None)
    assert text.splitlines()[-1] == "  database   postgresql+psycopg://***@db:5432/webhooks" and "pg-s3cret" not in text


def test_the_banner_counts_the_databases_endpoints(tmp_path: Path) -> None:
    """Seams finding 8: the banner said "none configured" beside endpoints created at runtime."""
    from tests.admin.test_runtime_config import KEYS, SHOP, api
    from tests.conftest import base_config, make_app
    from webhooks.configuration.settings import Settings
    from webhooks.service.process_setup import stored_endpoints
    from webhooks.service.serving import banner

    url = f"sqlite:///{tmp_path / 'webhooks.db'}"
    assert stored_endpoints(url) == 0  # no database yet: nothing, and no error
    app = make_app(base_config(url, WEBHOOKS_ENCRYPTION_KEYS=KEYS))
    assert api(app.test_client(), "POST", "/endpoints", SHOP).status_code == 201
    stored = stored_endpoints(url)
    assert stored == 1
    text = banner(Settings(admin_password="x"), ["http://127.0.0.1:8000"], None, None, stored)
    assert text.splitlines()[2] == (
        "  endpoints  +1 from the database (listed at http://127.0.0.1:8000/admin/endpoints)"
    )
