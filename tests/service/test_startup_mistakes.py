"""Every start-up mistake a newcomer makes is at most three lines, the last saying what is wrong and
what to do, with no traceback and an exit status other than 0 — or, for the console that is off, one
logged line. Each test runs the real command (``webhooks …``, the Procfile's gunicorn) as a process
of its own, in a temporary directory, with an explicit environment and an empty endpoints file."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
import requests

from tests.conftest import free_port, wait_until
from tests.support.processes import BIN, gunicorn_cmd, wait_http
from webhooks.service.cli import upgrade


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """Only what the commands need: nothing of the developer's shell (no endpoints, no password)."""
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    return {
        "PATH": f"{BIN}{os.pathsep}/usr/bin:/bin",
        "HOME": str(tmp_path),
        "WEBHOOKS_CONFIG": str(empty),
        "WEBHOOKS_LOG_FORMAT": "text",
        "PROMETHEUS_MULTIPROC_DIR": str(metrics),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'webhooks.db'}",
        "PYTHONUNBUFFERED": "1",
    }


def run(cmd: list[str], env: dict[str, str], cwd: Path, timeout: float = 90) -> tuple[int, list[str]]:
    result = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    return result.returncode, [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]


def assert_one_mistake(code: int, lines: list[str], *expected: str) -> str:
    """A non-zero exit, at most three lines, no traceback; the error line holds each of ``expected``."""
    assert code != 0, lines
    assert 1 <= len(lines) <= 3, lines
    assert not any("Traceback" in line or line.startswith("  File ") for line in lines), lines
    error = [line for line in lines if line.startswith("Error: ")]
    assert len(error) == 1, lines
    for text in expected:
        assert text in error[0], error[0]
    return error[0]


@pytest.fixture
def taken() -> Iterator[int]:
    """A port something else listens on."""
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    try:
        yield holder.getsockname()[1]
    finally:
        holder.close()


def test_serve_on_a_taken_port_names_it_and_says_to_use_port(env: dict[str, str], tmp_path: Path, taken: int) -> None:
    code, lines = run([str(BIN / "webhooks"), "serve", "--port", str(taken)], env, tmp_path)
    assert_one_mistake(code, lines, f"127.0.0.1:{taken} is already in use", "--port", "PORT")
    code, lines = run([str(BIN / "webhooks"), "serve"], env | {"PORT": str(taken)}, tmp_path)
    assert_one_mistake(code, lines, f"127.0.0.1:{taken} is already in use")
    assert not (tmp_path / "webhooks.db").exists()  # stopped before it migrated anything


def test_serve_on_a_port_that_is_no_port_says_so(env: dict[str, str], tmp_path: Path) -> None:
    code, lines = run([str(BIN / "webhooks"), "serve"], env | {"PORT": "abc"}, tmp_path)
    assert_one_mistake(code, lines, "Invalid value for '--port': 'abc' is not a valid integer")
    code, lines = run([str(BIN / "webhooks"), "serve", "--port", "99999"], env, tmp_path)
    assert_one_mistake(code, lines, "99999 is not a port number (0 to 65535)", "--port")


def test_the_procfiles_gunicorn_on_a_taken_port_names_it_and_says_to_set_port(
    env: dict[str, str], tmp_path: Path, taken: int
) -> None:
    code, lines = run(gunicorn_cmd(taken), env, tmp_path)
    assert_one_mistake(code, lines, f"127.0.0.1:{taken} is already in use", "PORT")
    assert not any("Connection in use" in line for line in lines)  # gunicorn's five tries never ran


BAD_URLS = [
    ("postgress://app:s3cret@db.internal/shop", "unsupported database scheme 'postgress'://", "postgresql://"),
    ("mysql://app:s3cret@db.internal/shop", "unsupported database scheme 'mysql'://", "PostgreSQL and SQLite"),
    ("not-a-url", "DATABASE_URL is not a database URL", "sqlite:///"),
    ("sqlite:///missing-dir/x.db", "directory 'missing-dir' does not exist", "create it or fix the path"),
]
COMMANDS = {
    "serve": ["webhooks", "serve", "--port", "0"],
    "worker": ["webhooks", "worker"],
    "db upgrade": ["webhooks", "db", "upgrade"],
    "gunicorn": [],  # the Procfile's web line: its master's on_starting
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize(("url", "what", "hint"), BAD_URLS, ids=[u.split(":")[0] for u, _, _ in BAD_URLS])
def test_a_wrong_database_url_is_one_line(
    env: dict[str, str], tmp_path: Path, command: str, url: str, what: str, hint: str
) -> None:
    cmd = [str(BIN / COMMANDS[command][0]), *COMMANDS[command][1:]] if COMMANDS[command] else gunicorn_cmd(free_port())
    redis = f"redis://127.0.0.1:{free_port()}/0"  # never reached: the database's URL is refused first
    code, lines = run(cmd, env | {"DATABASE_URL": url, "REDIS_URL": redis}, tmp_path)
    line = assert_one_mistake(code, lines, "DATABASE_URL", what, hint)
    assert "s3cret" not in "\n".join(lines)
    assert line.startswith("Error: configuration: ")


@pytest.mark.parametrize("command", ["worker", "serve"])
def test_the_worker_names_the_redis_it_cannot_reach_at_its_first_start(
    env: dict[str, str], tmp_path: Path, command: str
) -> None:
    """``serve`` too (the seams issue): it printed its banner, then the same error 11 times in 25 s."""
    port = free_port()  # nothing listens there
    cmd = [str(BIN / "webhooks"), command] + (["--port", str(free_port())] if command == "serve" else [])
    code, lines = run(cmd, env | {"REDIS_URL": f"redis://:s3cret@127.0.0.1:{port}/0"}, tmp_path)
    assert_one_mistake(code, lines, f"cannot reach Redis at 127.0.0.1:{port}", "REDIS_URL is right")
    assert "s3cret" not in "\n".join(lines)


def test_the_worker_refuses_a_redis_url_that_is_no_url(env: dict[str, str], tmp_path: Path) -> None:
    code, lines = run([str(BIN / "webhooks"), "worker"], env | {"REDIS_URL": "localhost:6379"}, tmp_path)
    assert_one_mistake(code, lines, "REDIS_URL is not a Redis URL; expected redis://")


def test_send_in_a_shell_without_endpoints_says_how_to_configure_one(env: dict[str, str], tmp_path: Path) -> None:
    payload = tmp_path / "event.json"
    payload.write_text('{"id": "evt_1", "object": "event", "type": "charge.succeeded"}')
    code, lines = run([str(BIN / "webhooks"), "send", "stripe", str(payload)], env, tmp_path)
    assert_one_mistake(
        code,
        lines,
        "no endpoint 'stripe'",
        "no endpoint is configured in this shell",
        "STRIPE_WEBHOOK_SECRET=",
        "WEBHOOKS_CONFIG",
    )


CONSOLE_OFF = (
    "console is off (answers 404) and the admin API takes only named tokens: "
    "set WEBHOOKS_ADMIN_PASSWORD to turn the console on"
)


@pytest.mark.slow
@pytest.mark.parametrize("password", ["", "s3cret"], ids=["without-password", "with-password"])
def test_the_procfiles_gunicorn_logs_once_that_the_console_is_off(
    env: dict[str, str], tmp_path: Path, password: str
) -> None:
    upgrade(env["DATABASE_URL"])
    port = free_port()
    extra = {"WEB_CONCURRENCY": "2", "WEB_THREADS": "4"} | ({"WEBHOOKS_ADMIN_PASSWORD": password} if password else {})
    proc = subprocess.Popen(
        gunicorn_cmd(port), env=env | extra, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()
    try:
        # Both web processes booted (each logs it): a line logged per process would be there twice.
        wait_until(lambda: sum("Booting worker" in line for line in list(lines)) >= 2, timeout=90)
        wait_http(f"http://127.0.0.1:{port}/healthz")  # a web process has loaded the app
        assert requests.get(f"http://127.0.0.1:{port}/admin/", timeout=60).status_code == (401 if password else 404)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        reader.join(timeout=30)  # every line the processes wrote, read
    said = [i for i, line in enumerate(lines) if CONSOLE_OFF in line]
    assert len(said) == (0 if password else 1), lines
    listening = next(i for i, line in enumerate(lines) if "Listening at" in line)
    assert all(i < listening for i in said), lines  # the master's, before any web process exists


def test_version_is_the_installed_packages(env: dict[str, str], tmp_path: Path) -> None:
    code, lines = run([str(BIN / "webhooks"), "--version"], env, tmp_path)
    assert (code, lines) == (0, [f"webhooks {metadata.version('webhooks')}"])


def test_serve_refuses_a_database_restored_without_its_key(env: dict[str, str], tmp_path: Path) -> None:
    """Seams finding 4: ``webhooks.db`` backed up and restored alone. ``serve`` must not make a new
    key (its endpoints would silently answer 404, and what it sealed next would not open with the
    real key): one line naming the missing file and what to do, and no key file written."""
    from tests.admin.test_runtime_config import KEYS, SHOP, api
    from tests.conftest import base_config, make_app

    url = env["DATABASE_URL"]
    upgrade(url)
    app = make_app(base_config(url, WEBHOOKS_ENCRYPTION_KEYS=KEYS))
    assert api(app.test_client(), "POST", "/endpoints", SHOP).status_code == 201
    app.extensions["webhooks"].engine.dispose()
    code, lines = run([str(BIN / "webhooks"), "serve", "--port", str(free_port())], env, tmp_path)
    assert_one_mistake(
        code, lines, "webhooks.db.key not found beside webhooks.db, which holds 1 sealed secret:", "restore it"
    )
    assert not (tmp_path / "webhooks.db.key").exists()
